// Package instant is the clock of a call's path: the monotonic clock's
// reading as an integer. Reading it costs one clock read where time.Now
// takes two, and comparing or subtracting two is integer arithmetic. A
// time meant for a person (a span's start) is a time.Time: Wall.
package instant

import "time"

// Time is a reading of the monotonic clock, in nanoseconds since origin;
// its methods are named as time.Time's. The zero Time stands for none.
type Time int64

// origin is when Times count from: a year before the process started, so
// that the zero Time, like time.Time's, is long before any time the
// process reads.
var origin = time.Now().Add(-365 * 24 * time.Hour)

// Now is the Time now.
func Now() Time { return Time(time.Since(origin)) }

func (i Time) Add(d time.Duration) Time { return i + Time(d) }
func (i Time) Sub(j Time) time.Duration { return time.Duration(i - j) }
func (i Time) Before(j Time) bool       { return i < j }

// IsZero reports whether i is the zero Time, which stands for none.
func (i Time) IsZero() bool { return i == 0 }

// Wall is i on the wall clock as time.Now reads it now.
func (i Time) Wall() time.Time { return time.Now().Add(-Now().Sub(i)) }
