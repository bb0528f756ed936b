package coordinatortest

import (
	"errors"
	"testing"
	"time"

	"github.com/cbgrpc/cbgrpc/coordinator"
)

// The optional causes (coordinator.CauseKeeper): the replica that made a
// transition hands back the span that recorded it; the coordinator keeps
// it with the state it moved to, answers it with that state to every
// caller, and delivers the transition again with it on the feed. A cause
// belongs to one state of one generation: the next transition ends it.

const (
	tripCause  = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	probeCause = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	lateCause  = "00-5d5e5f6061626364656667686970717a-1112131415161718-00"
)

func (h *harness) causeKeeper() coordinator.CauseKeeper {
	h.t.Helper()
	k, ok := h.c.(coordinator.CauseKeeper)
	if !ok {
		h.t.Skip("the coordinator is no coordinator.CauseKeeper")
	}
	return k
}

func (h *harness) keepCause(gen uint64, s coordinator.State, cause string) bool {
	h.t.Helper()
	kept, err := h.causeKeeper().KeepCause(h.t.Context(), coordinator.CauseRequest{Scope: h.scope, Generation: gen, State: s, Cause: cause})
	if err != nil {
		h.t.Fatalf("KeepCause(%.40q, gen %d, %v, %q): %v", h.scope, gen, s, cause, err)
	}
	return kept
}

// testCauseIsAnsweredWithItsState: a cause kept for the open state comes
// with every answer while it lasts, Admit's and Record's; the first cause
// stays; the transition to half-open ends it, and the half-open state
// takes a cause of its own; a recovery without a ramp answers none.
func testCauseIsAnsweredWithItsState(t *testing.T, f Factory) {
	h := newHarness(t, f, basePolicy())
	h.causeKeeper()
	gen := h.trip()
	if d := h.admit("before"); d.Cause != "" {
		t.Errorf("Admit before any cause was kept: cause %q; want none", d.Cause)
	}
	if h.keepCause(gen-1, open, tripCause) || h.keepCause(gen, halfOpen, tripCause) {
		t.Error("KeepCause of another generation or state kept it")
	}
	if !h.keepCause(gen, open, tripCause) {
		t.Fatal("KeepCause of the open state did not keep it")
	}
	if h.keepCause(gen, open, lateCause) {
		t.Error("a second KeepCause of the same state kept it; the first cause stays")
	}
	if d := h.admit("rejected"); d.Verdict != reject || d.Cause != tripCause {
		t.Errorf("Admit while open: %+v; want a rejection with cause %q", d, tripCause)
	}
	if res := h.record(fail(gen - 1)); res.Cause != tripCause {
		t.Errorf("Record while open: cause %q; want %q", res.Cause, tripCause)
	}

	h.waitOpenPeriod()
	d := h.admit("probe-1")
	if d.Transition == nil || d.Cause != "" {
		t.Fatalf("first Admit after the open period: %+v; want a transition to half-open, with no cause yet", d)
	}
	if !h.keepCause(gen, halfOpen, probeCause) {
		t.Fatal("KeepCause of the half-open state did not keep it")
	}
	h.admit("probe-2")
	if d := h.admit("probe-3"); d.Verdict != reject || d.Cause != probeCause {
		t.Errorf("Admit past the probe slots: %+v; want a rejection with cause %q", d, probeCause)
	}
	h.settle("probe-1", ok(gen))
	res := h.settle("probe-2", ok(gen))
	if res.Transition == nil || res.State != closed || res.Cause != "" {
		t.Errorf("the recovery: %+v; want closed, with no cause", res)
	}
	if h.keepCause(gen, halfOpen, lateCause) {
		t.Error("KeepCause of a state the breaker left kept it")
	}
}

// testCauseComesWithTheRamp: the recovery's cause comes with the closed
// state while its ramp lasts, and no longer.
func testCauseComesWithTheRamp(t *testing.T, f Factory) {
	p := basePolicy()
	p.RampFor = time.Second
	h := newHarness(t, f, p)
	h.causeKeeper()
	h.halfOpen()
	closedGen := h.recover()
	if !h.keepCause(closedGen, closed, probeCause) {
		t.Fatal("KeepCause of the recovery did not keep it")
	}
	if d := h.admit("ramping"); d.RampLeft == 0 || d.Cause != probeCause {
		t.Errorf("Admit while ramping: %+v; want the ramp with cause %q", d, probeCause)
	}
	h.advance(time.Second)
	if d := h.admit("ramped"); d.RampLeft != 0 || d.Cause != "" {
		t.Errorf("Admit after the ramp: %+v; want neither ramp nor cause", d)
	}
}

// testInvalidCauseIsAnError: a cause that is no traceparent is refused.
func testInvalidCauseIsAnError(t *testing.T, f Factory) {
	h := newHarness(t, f, basePolicy())
	k := h.causeKeeper()
	gen := h.trip()
	for _, cause := range []string{"", "not a traceparent", "00-4BF92F3577B34DA6A3CE929D0E0E4736-00F067AA0BA902B7-01",
		"00-00000000000000000000000000000000-00f067aa0ba902b7-01"} {
		_, err := k.KeepCause(t.Context(), coordinator.CauseRequest{Scope: h.scope, Generation: gen, State: open, Cause: cause})
		if !errors.Is(err, coordinator.ErrInvalidCause) {
			t.Errorf("KeepCause(%q): %v; want ErrInvalidCause", cause, err)
		}
	}
}

// testWatchDeliversTheCause: the feed delivers a transition whose cause is
// kept a second time, as it was, with its Cause.
func testWatchDeliversTheCause(t *testing.T, f Factory) {
	h := newHarness(t, f, basePolicy())
	h.causeKeeper()
	ctx, watch := h.watch()
	tr := h.tripTransition()
	if !h.keepCause(tr.Generation, open, tripCause) {
		t.Fatal("KeepCause did not keep it")
	}
	caused := tr
	caused.Cause = tripCause
	wantTransitions(t, ctx, watch, []coordinator.Transition{tr, caused})
}
