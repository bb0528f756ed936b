package coordinatortest

import (
	"context"
	"testing"
	"time"

	"github.com/cbgrpc/cbgrpc/coordinator"
)

// testWatchDeliversTransitionsOfFollowedScopes checks the optional
// [coordinator.Watcher]: every transition of a followed scope arrives, in
// order, exactly as the operation that made it reported it, and nothing of
// other scopes does.
func testWatchDeliversTransitionsOfFollowedScopes(t *testing.T, f Factory) {
	h := newHarness(t, f, basePolicy())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	watch := h.watch(ctx)

	other := h.on(h.scope + "/other")
	other.trip()

	var want []coordinator.Transition
	gen := h.snapshot().Generation
	for {
		if res := h.record(fail(gen)); res.Transition != nil {
			want = append(want, *res.Transition)
			break
		}
	}
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
	want = append(want, *res.Transition)

	wantTransitions(t, ctx, watch, want)
	if err := watch.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	if _, err := watch.Next(ctx); err == nil {
		t.Error("Next after Close returned no error")
	}
}

// watch follows the harness's scope on the coordinator's feed, skipping
// the test when the coordinator has none.
func (h *harness) watch(ctx context.Context) coordinator.Watch {
	h.t.Helper()
	w, isWatcher := h.c.(coordinator.Watcher)
	if !isWatcher {
		h.t.Skipf("%T does not implement coordinator.Watcher", h.c)
	}
	watch, err := w.Watch(ctx)
	if err != nil {
		h.t.Fatalf("Watch: %v", err)
	}
	h.t.Cleanup(func() { watch.Close() })
	if err := watch.Follow(ctx, h.scope); err != nil {
		h.t.Fatalf("Follow: %v", err)
	}
	return watch
}

// wantTransitions reads the feed and checks that exactly want arrives, in
// order, and then nothing more for a moment.
func wantTransitions(t *testing.T, ctx context.Context, watch coordinator.Watch, want []coordinator.Transition) {
	t.Helper()
	for i, w := range want {
		got, err := watch.Next(ctx)
		if err != nil {
			t.Fatalf("Next, transition %d: %v", i, err)
		}
		if !got.At.Equal(w.At) {
			t.Errorf("transition %d: At = %v, want %v", i, got.At, w.At)
		}
		got.At = w.At
		if got != w {
			t.Errorf("transition %d: got %+v, want %+v", i, got, w)
		}
	}
	quiet, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	if got, err := watch.Next(quiet); err == nil {
		t.Errorf("Next after the last transition: %+v, want nothing more", got)
	}
}
