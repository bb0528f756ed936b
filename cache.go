package cbgrpc

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cbgrpc/cbgrpc/coordinator"
)

// DefaultAdmissionCacheMaxAge bounds how long a scope read closed from the
// coordinator is admitted locally without asking again. A busy scope is
// confirmed by every Record result (one per record interval), so the bound
// matters for quiet scopes and for a feed that died without a word: it is
// the longest this process can go on admitting a scope that tripped in a
// way it did not hear of.
const DefaultAdmissionCacheMaxAge = time.Second

// feedRetry is how long the cache waits before opening a new feed after one
// failed; meanwhile every admission asks the coordinator.
const feedRetry = time.Second

// admissionCache answers admissions locally while the coordinator's
// transition feed says what a scope is doing: a scope known closed at
// generation g is admitted at g without a round trip, and a scope known
// open is rejected until its open period ends. Half-open always asks the
// coordinator, since only it can hand out probe slots.
//
// What it knows comes from the coordinator's own answers (Admit, Record,
// Settle) and from the feed, which tells of the transitions other replicas
// cause. It trusts an answer only for a scope that the feed followed before
// the question was asked, and only while that same feed connection lives:
// when the feed breaks, everything is forgotten and admissions ask the
// coordinator until a new feed follows the scope again.
type admissionCache struct {
	b      *Breaker
	w      coordinator.Watcher
	maxAge time.Duration

	// epoch is the number of the live feed connection, 0 while there is
	// none. Entries and followed scopes of another epoch are not trusted.
	epoch  atomic.Uint64
	epochs uint64 // connections so far; guarded by mu

	mu       sync.RWMutex
	entries  map[string]cacheEntry
	followed map[string]uint64 // scope -> epoch in which the feed followed it
	wanted   map[string]bool   // every scope this Breaker has protected
	watch    coordinator.Watch

	follow chan string   // scopes to follow on the current feed
	quit   chan struct{} // closed by stop
	wg     sync.WaitGroup

	// heardHook, when set (by tests, before the feed starts), sees every
	// transition once the cache has applied it.
	heardHook func(coordinator.Transition)
}

type cacheEntry struct {
	state   coordinator.State // half-open is kept only to order answers, never answered from
	gen     uint64
	until   time.Time // open, isolated: until when to reject without asking
	checked time.Time // closed, disabled: when the coordinator last said so
	epoch   uint64
}

func newAdmissionCache(b *Breaker, w coordinator.Watcher, maxAge time.Duration) *admissionCache {
	c := &admissionCache{
		b:        b,
		w:        w,
		maxAge:   maxAge,
		entries:  make(map[string]cacheEntry),
		followed: make(map[string]uint64),
		wanted:   make(map[string]bool),
		follow:   make(chan string, 1024),
		quit:     make(chan struct{}),
	}
	c.wg.Add(1)
	go c.run()
	return c
}

// lookup returns what the cache may answer for scope at now.
func (c *admissionCache) lookup(scope string, now time.Time) (cacheEntry, bool) {
	epoch := c.epoch.Load()
	if epoch == 0 {
		return cacheEntry{}, false
	}
	c.mu.RLock()
	e, ok := c.entries[scope]
	c.mu.RUnlock()
	if !ok || e.epoch != epoch {
		return cacheEntry{}, false
	}
	switch e.state {
	case coordinator.StateClosed, coordinator.StateDisabled:
		return e, now.Sub(e.checked) < c.maxAge
	case coordinator.StateOpen, coordinator.StateIsolated:
		return e, now.Before(e.until)
	}
	return cacheEntry{}, false
}

// begin is called before a coordinator call about scope. It returns the
// epoch whose feed already follows scope (0 if none), to be handed to
// observe with the answer; and it asks the feed to follow scope if it does
// not.
func (c *admissionCache) begin(scope string) uint64 {
	epoch := c.epoch.Load()
	c.mu.RLock()
	e, ok := c.followed[scope]
	wanted := c.wanted[scope]
	c.mu.RUnlock()
	if ok && e == epoch && epoch != 0 {
		return epoch
	}
	if !wanted {
		c.mu.Lock()
		c.wanted[scope] = true
		c.mu.Unlock()
		select {
		case c.follow <- scope:
		default:
			// The follower is behind; the next feed follows every wanted
			// scope anyway, and until then this scope asks the coordinator.
		}
	}
	return 0
}

// observe keeps what the coordinator answered about scope, to a question
// asked in epoch (from begin). until is when an open period or an
// isolation ends, as far as the answer tells; an open answer without it
// changes nothing, and an isolation is trusted for at most maxAge, since
// its release may come at any time.
func (c *admissionCache) observe(epoch uint64, scope string, s coordinator.State, gen uint64, until time.Time) {
	if epoch == 0 {
		return
	}
	now := time.Now()
	switch s {
	case coordinator.StateClosed, coordinator.StateDisabled:
		c.put(epoch, scope, cacheEntry{state: s, gen: gen, checked: now})
	case coordinator.StateIsolated:
		if limit := now.Add(c.maxAge); until.IsZero() || until.After(limit) {
			until = limit
		}
		c.put(epoch, scope, cacheEntry{state: s, gen: gen, until: until})
	case coordinator.StateOpen:
		if !until.IsZero() {
			c.put(epoch, scope, cacheEntry{state: s, gen: gen, until: until})
		}
	default:
		c.put(epoch, scope, cacheEntry{state: s, gen: gen})
	}
}

// suspect forgets that scope is closed, so that its next admission asks the
// coordinator: called when this process sees one of its calls fail.
func (c *admissionCache) suspect(scope string) {
	c.mu.Lock()
	if e, ok := c.entries[scope]; ok && e.state == coordinator.StateClosed {
		delete(c.entries, scope)
	}
	c.mu.Unlock()
}

// put stores e unless the cache knows something newer: generations only
// grow, and within one generation open comes before half-open.
func (c *admissionCache) put(epoch uint64, scope string, e cacheEntry) {
	e.epoch = epoch
	c.mu.Lock()
	defer c.mu.Unlock()
	if epoch != c.epoch.Load() {
		return
	}
	if old, ok := c.entries[scope]; ok && old.epoch == epoch {
		if e.gen < old.gen || (e.gen == old.gen && e.state == coordinator.StateOpen && old.state == coordinator.StateHalfOpen) {
			return
		}
	}
	if e.state == coordinator.StateHalfOpen {
		// Remembered as a tombstone of its generation, so that an older
		// answer cannot bring back "open"; never answered from.
		e.until = time.Time{}
	}
	c.entries[scope] = e
}

// run keeps a feed open while the Breaker lives, re-following every
// wanted scope on each new connection.
func (c *admissionCache) run() {
	defer c.wg.Done()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		<-c.quit
		cancel()
	}()
	for {
		c.serve(ctx)
		select {
		case <-c.quit:
			return
		case <-time.After(feedRetry):
		}
	}
}

// serve runs one feed connection until it breaks or the cache stops.
func (c *admissionCache) serve(ctx context.Context) {
	watch, err := c.w.Watch(ctx)
	if err != nil {
		c.b.tel.feedLost(ctx, err)
		return
	}
	c.mu.Lock()
	c.epochs++
	epoch := c.epochs
	scopes := make([]string, 0, len(c.wanted))
	for s := range c.wanted {
		scopes = append(scopes, s)
	}
	c.watch = watch
	c.mu.Unlock()
	if len(scopes) > 0 {
		if err := watch.Follow(ctx, scopes...); err != nil {
			watch.Close()
			c.b.tel.feedLost(ctx, err)
			return
		}
	}
	c.mu.Lock()
	for _, s := range scopes {
		c.followed[s] = epoch
	}
	c.epoch.Store(epoch)
	c.mu.Unlock()

	fctx, stopFollower := context.WithCancel(ctx)
	var followers sync.WaitGroup
	followers.Add(1)
	go func() {
		defer followers.Done()
		c.follower(fctx, watch, epoch)
	}()
	for {
		t, err := watch.Next(ctx)
		if err != nil {
			c.lose(epoch)
			stopFollower()
			watch.Close()
			followers.Wait()
			if ctx.Err() == nil {
				c.b.tel.feedLost(ctx, err)
			}
			return
		}
		c.heard(epoch, t)
	}
}

// follower follows the scopes new to this Breaker on the feed of epoch.
func (c *admissionCache) follower(ctx context.Context, watch coordinator.Watch, epoch uint64) {
	for {
		select {
		case <-ctx.Done():
			return
		case scope := <-c.follow:
			if c.epoch.Load() != epoch {
				return
			}
			if err := watch.Follow(ctx, scope); err != nil {
				// The feed is broken: Next says so, and the next feed
				// follows every wanted scope.
				return
			}
			c.mu.Lock()
			c.followed[scope] = epoch
			c.mu.Unlock()
		}
	}
}

// lose forgets everything learned in epoch: the feed may have missed
// transitions.
func (c *admissionCache) lose(epoch uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.epoch.Load() != epoch {
		return
	}
	c.epoch.Store(0)
	clear(c.entries)
	clear(c.followed)
}

// heard applies a transition another replica (or this one) caused, as any
// answer of the coordinator: to the cache and to the process's memory of
// non-closed scopes. The open period it starts is at least OpenFor,
// counted in local time, not from t.At: the coordinator's clock may be
// skewed from ours.
func (c *admissionCache) heard(epoch uint64, t coordinator.Transition) {
	c.b.learnResult(epoch, t.Scope, coordinator.Result{State: t.To, Generation: t.Generation, Transition: &t})
	if c.heardHook != nil {
		c.heardHook(t)
	}
}

// stop ends the feed and waits for its goroutines until deadline.
func (c *admissionCache) stop(deadline time.Time) bool {
	close(c.quit)
	return waitUntil(&c.wg, deadline)
}
