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
	w, isWatcher := h.c.(coordinator.Watcher)
	if !isWatcher {
		t.Skipf("%T does not implement coordinator.Watcher", h.c)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	watch, err := w.Watch(ctx)
	if err != nil {
		t.Fatalf("Watch: %v", err)
	}
	defer watch.Close()
	if err := watch.Follow(ctx, h.scope); err != nil {
		t.Fatalf("Follow: %v", err)
	}

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

	quiet, cancelQuiet := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancelQuiet()
	if got, err := watch.Next(quiet); err == nil {
		t.Errorf("Next after the last transition: %+v, want nothing more", got)
	}
	if err := watch.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	if _, err := watch.Next(ctx); err == nil {
		t.Error("Next after Close returned no error")
	}
}
