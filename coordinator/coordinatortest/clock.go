package coordinatortest

import (
	"sync"
	"time"
)

// Start is where every [Clock] begins: a whole second, so that bucket
// boundaries are easy to reason about, and far from the Unix epoch, so that
// no timestamp reads as zero.
var Start = time.Date(2030, time.January, 1, 0, 0, 0, 0, time.UTC)

// Clock is a fake clock for tests: it moves only when a test moves it, and
// is safe for concurrent use. Give its Now to a coordinator
// (memory.WithClock, redis.WithClock) to drive a breaker through its states
// without sleeping. It is the one fake clock of this module's tests.
type Clock struct {
	mu  sync.Mutex
	now time.Time
}

// NewClock returns a clock at [Start].
func NewClock() *Clock { return &Clock{now: Start} }

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock forward by d.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// Set moves the clock to t; it never moves it back.
func (c *Clock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if t.After(c.now) {
		c.now = t
	}
}
