package cbgrpc

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cbgrpc/cbgrpc/coordinator"
	"github.com/cbgrpc/cbgrpc/coordinator/coordinatortest"
	"github.com/cbgrpc/cbgrpc/coordinator/memory"
	"github.com/cbgrpc/cbgrpc/internal/instant"
)

// followed reports whether b's live feed follows scope, so that the
// answers about it serve admissions.
func followed(b *Breaker, scope string) bool {
	live := b.known.live.Load()
	b.known.mu.RLock()
	defer b.known.mu.RUnlock()
	e := b.known.scopes[scope]
	return e != nil && live != 0 && e.followed == live
}

// cached returns what b knows of scope, and whether that decides an
// admission now without the coordinator.
func cached(b *Breaker, scope string) (fact, bool) {
	b.known.mu.RLock()
	var f fact
	if e := b.known.scopes[scope]; e != nil {
		f = e.fact
	}
	b.known.mu.RUnlock()
	return f, b.health.Trusted() && b.known.answers(&f, instant.Now())
}

// admitN admits n calls of scope and finishes each as a success.
func admitN(t *testing.T, b *Breaker, scope string, n int) {
	t.Helper()
	for range n {
		tk, err := admitCall(b, context.Background(), &call{scope: scope, method: testMethod})
		if err != nil {
			t.Fatalf("admit: %v", err)
		}
		b.finish(context.Background(), tk, nil)
	}
}

func TestCacheAdmitsKnownClosedScopeWithoutAsking(t *testing.T) {
	fc := newTestCoordinator(t, memory.New()).withFeed()
	b := newBreaker(t, fc, WithPolicy(tripPolicy()))
	const scope = "cache/closed"
	admitN(t, b, scope, 1)
	eventually(t, "the feed follows the scope", func() bool { return followed(b, scope) })
	admitN(t, b, scope, 1) // asked after the scope is followed: now cached
	asked := fc.admits.Load()
	admitN(t, b, scope, 1000)
	if got := fc.admits.Load() - asked; got != 0 {
		t.Errorf("1000 admissions of a cached closed scope asked the coordinator %d times, want 0", got)
	}
}

func TestCacheHearsTripOfAnotherReplica(t *testing.T) {
	m := memory.New()
	fc := newTestCoordinator(t, m).withFeed()
	b := newBreaker(t, fc, WithPolicy(tripPolicy()))
	other := newBreaker(t, m, WithPolicy(tripPolicy()), WithAdmissionCache(0))
	const scope = "cache/trip"
	admitN(t, b, scope, 1)
	eventually(t, "the feed follows the scope", func() bool { return followed(b, scope) })
	admitN(t, b, scope, 1)
	if e, ok := cached(b, scope); !ok || e.state != coordinator.StateClosed {
		t.Fatalf("cache: %+v, %v; want closed", e, ok)
	}

	// The other replica trips the scope; this one hears it on the feed.
	tk, err := admitCall(other, context.Background(), &call{scope: scope, method: testMethod})
	if err != nil {
		t.Fatal(err)
	}
	other.finish(context.Background(), tk, errTransport)
	eventually(t, "the trip reaches the cache", func() bool {
		e, ok := cached(b, scope)
		return ok && e.state == coordinator.StateOpen
	})
	asked := fc.admits.Load()
	_, err = admitCall(b, context.Background(), &call{scope: scope, method: testMethod})
	var oe *OpenError
	if !errors.As(err, &oe) || oe.State != coordinator.StateOpen || oe.RetryAfter <= 0 {
		t.Fatalf("admission after the trip: %v, want a local rejection with RetryAfter", err)
	}
	if fc.admits.Load() != asked {
		t.Error("the rejection asked the coordinator")
	}
	// The process remembers the scope as open, for when the coordinator
	// is unreachable.
	if !notClosed(b, scope) {
		t.Error("a trip heard on the feed is not remembered as non-closed")
	}
}

func TestCacheDroppedWhenFeedBreaks(t *testing.T) {
	fc := newTestCoordinator(t, memory.New()).withFeed()
	m := newMetrics()
	b := newBreaker(t, fc, WithPolicy(tripPolicy()), WithMeterProvider(m.mp))
	const scope = "cache/feed-lost"
	admitN(t, b, scope, 1)
	eventually(t, "the feed follows the scope", func() bool { return followed(b, scope) })
	admitN(t, b, scope, 1)
	if _, ok := cached(b, scope); !ok {
		t.Fatal("closed scope not cached")
	}

	fc.breakFeed()
	eventually(t, "the cache is dropped", func() bool { return b.known.live.Load() == 0 })
	asked := fc.admits.Load()
	admitN(t, b, scope, 10)
	if got := fc.admits.Load() - asked; got != 10 {
		t.Errorf("10 admissions without a feed asked the coordinator %d times, want 10", got)
	}
	if n := m.sum(t, "cbgrpc.feed.losses"); n < 1 {
		t.Errorf("cbgrpc.feed.losses = %d after the feed broke, want at least 1", n)
	}

	fc.refuse.Store(false) // mended
	eventually(t, "a new feed follows the scope again", func() bool { return followed(b, scope) })
	admitN(t, b, scope, 1)
	asked = fc.admits.Load()
	admitN(t, b, scope, 10)
	if got := fc.admits.Load() - asked; got != 0 {
		t.Errorf("after the feed came back, 10 admissions asked %d times, want 0", got)
	}
}

func TestCacheAsksAgainAfterMaxAge(t *testing.T) {
	fc := newTestCoordinator(t, memory.New()).withFeed()
	const maxAge = 20 * time.Millisecond
	b := newBreaker(t, fc, WithPolicy(tripPolicy()), WithAdmissionCache(maxAge))
	const scope = "cache/max-age"
	admitN(t, b, scope, 1)
	eventually(t, "the feed follows the scope", func() bool { return followed(b, scope) })
	admitN(t, b, scope, 1)
	e, ok := cached(b, scope)
	if !ok {
		t.Fatal("closed scope not cached")
	}
	// Wait out the bound (no outcome is recorded meanwhile to refresh it).
	eventually(t, "the entry ages out", func() bool { return instant.Now().Sub(e.checked) > maxAge })
	asked := fc.admits.Load()
	admitN(t, b, scope, 1)
	if fc.admits.Load() != asked+1 {
		t.Error("an entry older than the max age was answered locally")
	}
}

func TestCacheHalfOpenAlwaysAsks(t *testing.T) {
	clk := coordinatortest.NewClock()
	m := memory.New(memory.WithClock(clk.Now))
	fc := newTestCoordinator(t, m).withFeed()
	p := tripPolicy()
	p.Probes = 2
	p.ProbeSuccesses = 2
	p.OpenFor = 50 * time.Millisecond
	b := newBreaker(t, fc, WithPolicy(p))
	const scope = "cache/half-open"
	admitN(t, b, scope, 1)
	eventually(t, "the feed follows the scope", func() bool { return followed(b, scope) })
	tk, err := admitCall(b, context.Background(), &call{scope: scope, method: testMethod})
	if err != nil {
		t.Fatal(err)
	}
	b.finish(context.Background(), tk, errTransport)
	eventually(t, "the trip reaches the cache", func() bool {
		e, ok := cached(b, scope)
		return ok && e.state == coordinator.StateOpen
	})
	clk.Advance(p.OpenFor)
	// The cache's open period is measured in local time: wait it out.
	eventually(t, "the cached open period ends", func() bool { _, ok := cached(b, scope); return !ok })
	asked := fc.admits.Load()
	for range 3 {
		admitCall(b, context.Background(), &call{scope: scope, method: testMethod})
	}
	if got := fc.admits.Load() - asked; got != 3 {
		t.Errorf("3 admissions in half-open asked the coordinator %d times, want 3", got)
	}
}

func TestWithAdmissionCacheRejectsNegative(t *testing.T) {
	_, err := New(memory.New(), WithAdmissionCache(-time.Second))
	if err == nil || !strings.Contains(err.Error(), "WithAdmissionCache") {
		t.Fatalf("New with a negative max age: %v, want an error naming WithAdmissionCache", err)
	}
}

// A failure seen by this process sends the scope's next admission to the
// coordinator: a dependency that starts failing is not fed from the cache
// while the news of the trip travels.
func TestCacheAsksAfterAFailure(t *testing.T) {
	fc := newTestCoordinator(t, memory.New()).withFeed()
	// The failure's Record is held: its answer ("closed") would make the
	// scope cached again, and may otherwise come before the admission.
	var holding atomic.Bool
	hold := make(chan struct{})
	fc.recordHook = func() {
		if holding.Load() {
			<-hold
		}
	}
	p := tripPolicy()
	p.ConsecutiveFailures = 3
	b := newBreaker(t, fc, WithPolicy(p), WithCoordinatorTimeout(time.Hour))
	t.Cleanup(func() { close(hold) }) // before Close, which waits for the Record
	const scope = "cache/failure"
	admitN(t, b, scope, 1)
	eventually(t, "the feed follows the scope", func() bool { return followed(b, scope) })
	admitN(t, b, scope, 1)
	if _, ok := cached(b, scope); !ok {
		t.Fatal("closed scope not cached")
	}
	holding.Store(true)
	tk, err := admitCall(b, context.Background(), &call{scope: scope, method: testMethod})
	if err != nil {
		t.Fatal(err)
	}
	b.finish(context.Background(), tk, errTransport)
	asked := fc.admits.Load()
	admitN(t, b, scope, 1)
	if fc.admits.Load() != asked+1 {
		t.Error("the admission after a failure was answered from the cache")
	}
}

// From a coordinator error until a coordinator call succeeds, the cache is
// not consulted: a failed Record (which starts no back-off, since no call
// waited for it) sends the next admission to the coordinator, and that
// answer makes the cache trusted again.
func TestCacheNotUsedWhileCoordinatorFails(t *testing.T) {
	fc := newTestCoordinator(t, memory.New()).withFeed()
	b := newBreaker(t, fc, WithPolicy(tripPolicy()), WithCoordinatorBackoff(time.Hour))
	const scope = "cache/coordinator-down"
	admitN(t, b, scope, 1)
	eventually(t, "the feed follows the scope", func() bool { return followed(b, scope) })
	admitN(t, b, scope, 1)
	if _, ok := cached(b, scope); !ok {
		t.Fatal("closed scope not cached")
	}
	fc.failRecords.Store(true)
	admitN(t, b, scope, 1) // from the cache; its Record fails
	eventually(t, "the Record's error", func() bool { return !b.health.Trusted() })
	if b.health.InBackoff() {
		t.Error("a failed Record started the back-off; only a failed admission does")
	}
	fc.failRecords.Store(false)
	asked := fc.admits.Load()
	admitN(t, b, scope, 2)
	if got := fc.admits.Load() - asked; got != 1 {
		t.Errorf("after a coordinator error, 2 admissions asked the coordinator %d times; want 1 (then the cache is trusted again)", got)
	}
}

// An operator's states are cached too: an isolated scope is rejected and a
// disabled one admitted without a round trip per call, and a release heard
// on the feed is obeyed at once.
func TestCacheFollowsOperatorStates(t *testing.T) {
	m := memory.New()
	fc := newTestCoordinator(t, m).withFeed()
	b := newBreaker(t, fc, WithPolicy(tripPolicy()))
	ctx := context.Background()
	p := tripPolicy()
	const scope = "cache/operator"
	admitN(t, b, scope, 1)
	eventually(t, "the feed follows the scope", func() bool { return followed(b, scope) })

	if _, err := m.Isolate(ctx, coordinator.CommandRequest{Scope: scope, Policy: p, Note: coordinator.Note{By: "test", Reason: "isolate"}}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the isolation reaches the cache", func() bool {
		e, ok := cached(b, scope)
		return ok && e.state == coordinator.StateIsolated
	})
	asked := fc.admits.Load()
	for range 10 {
		if _, err := admitCall(b, ctx, &call{scope: scope, method: testMethod}); !errors.Is(err, ErrOpen) {
			t.Fatalf("admission of an isolated scope: %v, want ErrOpen", err)
		}
	}
	if got := fc.admits.Load() - asked; got != 0 {
		t.Errorf("10 admissions of an isolated scope asked the coordinator %d times, want 0", got)
	}

	if _, err := m.Disable(ctx, coordinator.CommandRequest{Scope: scope, Policy: p, Note: coordinator.Note{By: "test", Reason: "disable"}}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the disabling reaches the cache", func() bool {
		e, ok := cached(b, scope)
		return ok && e.state == coordinator.StateDisabled
	})
	asked = fc.admits.Load()
	admitN(t, b, scope, 10)
	if got := fc.admits.Load() - asked; got != 0 {
		t.Errorf("10 admissions of a disabled scope asked the coordinator %d times, want 0", got)
	}
}
