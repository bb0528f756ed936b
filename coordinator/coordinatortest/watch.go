package coordinatortest

import (
	"context"
	"testing"
	"time"

	"github.com/cbgrpc/cbgrpc/coordinator"
)

// The optional transition feed ([coordinator.Watcher]): a Watch delivers
// every transition of the scopes it follows, exactly as the operation that
// made it reported it (OpenUntil included), and nothing of other scopes.

func testWatchDeliversTransitionsOfFollowedScopes(t *testing.T, f Factory) {
	h := newHarness(t, f, basePolicy())
	ctx, watch := h.watch()

	other := h.on(h.scope + "/other")
	other.trip()

	want := []coordinator.Transition{h.tripTransition()}
	h.waitOpenPeriod()
	d := h.admit("watch-probe-1")
	if d.Transition == nil {
		t.Fatalf("first Admit after the open period: %+v, want a transition to half-open", d)
	}
	want = append(want, *d.Transition)
	h.admit("watch-probe-2")
	h.settle("watch-probe-1", ok(d.Generation))
	res := h.settle("watch-probe-2", ok(d.Generation))
	if res.Transition == nil {
		t.Fatalf("second successful probe: %+v, want a transition to closed", res)
	}
	want = append(want, *res.Transition, h.tripTransition())

	wantTransitions(t, ctx, watch, want)
	if err := watch.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	if _, err := watch.Next(ctx); err == nil {
		t.Error("Next after Close returned no error")
	}
}

// testWatchUnfollow: after Unfollow returns, Next delivers no transition of
// the scopes it names, not even those already on their way, while the
// other scopes are still delivered; a scope that was not followed is
// ignored, a scope followed again is delivered again, and Unfollow after
// Close is an error.
func testWatchUnfollow(t *testing.T, f Factory) {
	h := newHarness(t, f, basePolicy())
	ctx, watch := h.watch()
	kept := h.on(h.scope + "/kept")
	if err := watch.Follow(ctx, kept.scope); err != nil {
		t.Fatalf("Follow: %v", err)
	}

	h.trip() // on its way when h.scope is unfollowed
	want := []coordinator.Transition{kept.tripTransition()}
	if err := watch.Unfollow(ctx, h.scope, h.scope+"/never followed"); err != nil {
		t.Fatalf("Unfollow: %v", err)
	}
	h.waitOpenPeriod()
	p := h.admit("after Unfollow")
	// Both open periods ended together: kept's transition comes last.
	d := kept.admit("kept")
	if d.Transition == nil {
		t.Fatalf("kept's first Admit after the open period: %+v, want a transition to half-open", d)
	}
	wantTransitions(t, ctx, watch, append(want, *d.Transition))

	if err := watch.Follow(ctx, h.scope); err != nil {
		t.Fatalf("Follow again: %v", err)
	}
	res := h.settle("after Unfollow", fail(p.Generation))
	if res.Transition == nil {
		t.Fatalf("a failed probe: %+v, want a transition to open", res)
	}
	wantTransitions(t, ctx, watch, []coordinator.Transition{*res.Transition})

	if err := watch.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	if err := watch.Unfollow(ctx, kept.scope); err == nil {
		t.Error("Unfollow after Close returned no error")
	}
}

// watch follows the harness's scope on the coordinator's feed, skipping
// the test when the coordinator has none. The context it returns bounds
// every wait on the feed.
func (h *harness) watch() (context.Context, coordinator.Watch) {
	h.t.Helper()
	w, isWatcher := h.c.(coordinator.Watcher)
	if !isWatcher {
		h.t.Skipf("%T does not implement coordinator.Watcher", h.c)
	}
	ctx, cancel := context.WithTimeout(h.t.Context(), 10*time.Second)
	h.t.Cleanup(cancel)
	watch, err := w.Watch(ctx)
	if err != nil {
		h.t.Fatalf("Watch: %v", err)
	}
	h.t.Cleanup(func() { watch.Close() })
	if err := watch.Follow(ctx, h.scope); err != nil {
		h.t.Fatalf("Follow: %v", err)
	}
	return ctx, watch
}

// wantTransitions reads as many transitions as want holds and checks that
// they are want, in order for each scope (a feed orders the transitions of
// one scope, not necessarily those of different ones). It waits for
// nothing more: a test proves that something does not arrive by making
// the last transition it wants of a scope after it.
func wantTransitions(t *testing.T, ctx context.Context, watch coordinator.Watch, want []coordinator.Transition) {
	t.Helper()
	queues := map[string][]coordinator.Transition{}
	for _, w := range want {
		queues[w.Scope] = append(queues[w.Scope], w)
	}
	for i := range want {
		got, err := watch.Next(ctx)
		if err != nil {
			t.Fatalf("Next, transition %d of %d: %v", i+1, len(want), err)
		}
		q := queues[got.Scope]
		if len(q) == 0 {
			t.Fatalf("transition %d: %+v; want none more of scope %.60q", i+1, got, got.Scope)
		}
		w := q[0]
		queues[got.Scope] = q[1:]
		if !got.At.Equal(w.At) || !got.OpenUntil.Equal(w.OpenUntil) {
			t.Errorf("transition %d: At %v, OpenUntil %v; want %v, %v", i+1, got.At, got.OpenUntil, w.At, w.OpenUntil)
		}
		got.At, got.OpenUntil = w.At, w.OpenUntil
		if got != w {
			t.Errorf("transition %d: got %+v, want %+v", i+1, got, w)
		}
	}
}
