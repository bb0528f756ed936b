package coordinatortest

import (
	"sync"
	"time"
)

// start is where every fake clock begins: a whole second, so that bucket
// boundaries are easy to reason about, and far from the Unix epoch, so that
// no timestamp reads as zero.
var start = time.Date(2030, time.January, 1, 0, 0, 0, 0, time.UTC)

// fakeClock is the time a coordinator under test reads. It moves only when
// a test moves it.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func newFakeClock() *fakeClock { return &fakeClock{now: start} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// Set moves the clock to t; it never moves it back.
func (c *fakeClock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if t.After(c.now) {
		c.now = t
	}
}
