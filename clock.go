package cbgrpc

import "time"

// clock reads the time on a call's path: a reading of the monotonic clock
// alone, since epoch, where time.Now reads the wall clock too. The times
// it gives compare and subtract as time.Now's do; their wall reading is
// epoch's plus the time elapsed, so one meant for a person (a span's
// start) is taken from time.Now instead (wall).
type clock struct{ epoch time.Time }

func newClock() clock { return clock{epoch: time.Now()} }

func (c clock) now() time.Time { return c.epoch.Add(time.Since(c.epoch)) }

// wall is t on the wall clock as time.Now reads it now.
func wall(t time.Time) time.Time { return time.Now().Add(-time.Since(t)) }
