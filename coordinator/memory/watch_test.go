package memory_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/cbgrpc/cbgrpc/coordinator"
	"github.com/cbgrpc/cbgrpc/coordinator/coordinatortest"
	"github.com/cbgrpc/cbgrpc/coordinator/memory"
)

// flapPolicy trips on one failure and closes on one successful probe a
// millisecond later, so that each round makes three transitions.
var flapPolicy = coordinator.Policy{Window: time.Second, Buckets: 10, ConsecutiveFailures: 1,
	OpenFor: time.Millisecond, Probes: 1, ProbeLease: time.Second, ProbeSuccesses: 1}

// flap trips scope and closes it again: closed -> open -> half-open ->
// closed.
func flap(t *testing.T, c *memory.Coordinator, clk *coordinatortest.Clock, scope string) {
	t.Helper()
	ctx := context.Background()
	d, _ := c.Admit(ctx, coordinator.AdmitRequest{Scope: scope, Policy: flapPolicy, Claim: "call"})
	if r, _ := c.Record(ctx, coordinator.RecordRequest{Scope: scope, Policy: flapPolicy, Outcomes: []coordinator.Outcome{{Generation: d.Generation, Failure: true}}}); r.Transition == nil {
		t.Fatalf("no trip: %+v", r)
	}
	clk.Advance(time.Millisecond)
	d, _ = c.Admit(ctx, coordinator.AdmitRequest{Scope: scope, Policy: flapPolicy, Claim: "probe"})
	if r, _ := c.Settle(ctx, coordinator.SettleRequest{Scope: scope, Policy: flapPolicy, Claim: "probe", Outcome: coordinator.Outcome{Generation: d.Generation}}); r.Transition == nil {
		t.Fatalf("probe did not close: %+v", r)
	}
}

func watch(t *testing.T, c *memory.Coordinator, scopes ...string) coordinator.Watch {
	t.Helper()
	w, err := c.Watch(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	if err := w.Follow(context.Background(), scopes...); err != nil {
		t.Fatal(err)
	}
	return w
}

// A reader that falls behind loses its feed rather than blocking the
// coordinator: after the buffered transitions it gets ErrFeedLost.
func TestWatchReaderThatFallsBehindLosesTheFeed(t *testing.T) {
	c, clk := onFakeClock()
	w := watch(t, c, "s")
	for published := 0; published <= memory.FeedBuffer; published += 3 {
		flap(t, c, clk, "s")
	}
	ctx := context.Background()
	for i := range memory.FeedBuffer {
		if _, err := w.Next(ctx); err != nil {
			t.Fatalf("Next %d of the buffered transitions: %v", i, err)
		}
	}
	if _, err := w.Next(ctx); !errors.Is(err, coordinator.ErrFeedLost) {
		t.Fatalf("Next after the buffer: %v, want ErrFeedLost", err)
	}
}

// Transitions on their way when a scope is unfollowed are dropped, even if
// the scope is followed again before Next reads them.
func TestWatchFollowedAgainDropsWhatWasOnItsWay(t *testing.T) {
	c, clk := onFakeClock()
	w := watch(t, c, "s")
	ctx := context.Background()
	flap(t, c, clk, "s")
	if err := w.Unfollow(ctx, "s"); err != nil {
		t.Fatal(err)
	}
	if err := w.Follow(ctx, "s"); err != nil {
		t.Fatal(err)
	}
	clk.Advance(time.Millisecond)
	followed := clk.Now()
	flap(t, c, clk, "s")
	for i := range 3 {
		tr, err := w.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if tr.At.Before(followed) {
			t.Fatalf("transition %d: %+v, made before the scope was unfollowed; want only those since it was followed again", i+1, tr)
		}
	}
}
