package cbgrpc

import "time"

// instant is a time on a call's path: the monotonic clock's reading, in
// nanoseconds since origin. Reading it costs one clock read where
// time.Now takes two, and comparing or subtracting two is integer
// arithmetic; its methods are named as time.Time's. The table's times are
// instants too, so that a cached admission needs no conversion. A time
// meant for a person (a span's start) is a time.Time (wall).
type instant int64

// origin is when instants count from: a year before the process started,
// so that the zero instant, like time.Time's, is long before any time the
// process reads. (Not the feed's epochs, which number its connections.)
var origin = time.Now().Add(-365 * 24 * time.Hour)

// instantNow is the instant now.
func instantNow() instant { return instant(time.Since(origin)) }

func (i instant) Add(d time.Duration) instant { return i + instant(d) }
func (i instant) Sub(j instant) time.Duration { return time.Duration(i - j) }
func (i instant) Before(j instant) bool       { return i < j }

// IsZero reports whether i is the zero instant, which stands for none.
func (i instant) IsZero() bool { return i == 0 }

// wall is i on the wall clock as time.Now reads it now.
func (i instant) wall() time.Time { return time.Now().Add(-instantNow().Sub(i)) }
