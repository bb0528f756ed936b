package coordinatortest

import (
	"testing"
	"time"
)

// Rule 6 of the contract (docs/architecture.md): open and half-open state never expire; a closed
// scope is kept until every bucket its generation wrote has left the
// window (a newborn one for a window from its birth), then it is not born
// until the next write gives birth to it again, in a new generation.

func testOpenStateNeverExpires(t *testing.T, f Factory) {
	h := newHarness(t, f, basePolicy())
	gen := h.trip()
	h.advance(1000 * time.Hour)
	h.wantState("a long time after the trip", halfOpen, gen)
	d := h.admit("a")
	h.wantDecision("a long time after the trip", d, probe, halfOpen, gen)
	h.wantTransition("a long time after the trip", d.Transition, open, halfOpen, gen, "open period ended")
}

func testHalfOpenStateNeverExpires(t *testing.T, f Factory) {
	h := newHarness(t, f, basePolicy())
	gen := h.halfOpen("a")
	h.settle("a", ok(gen))
	h.advance(1000 * time.Hour)
	s := h.wantState("a long time after a probe", halfOpen, gen)
	if s.ProbeSuccesses != 1 || s.ProbesInFlight != 0 {
		t.Errorf("snapshot %+v; want 1 probe success kept, no probe in flight", s)
	}
	d := h.admit("b")
	h.wantDecision("a long time after a probe", d, probe, halfOpen, gen)
	h.wantNoTransition("a long time after a probe", d.Transition)
	h.wantTransition("second success", h.settle("b", ok(gen)).Transition, halfOpen, closed, h.next(gen), "probes succeeded 2/2")
}

// testNewbornScopeIsKeptForAWindow: a scope born by an Admit is kept until
// the bucket of its birth leaves the window. Admits write no bucket, so
// they keep it no longer.
func testNewbornScopeIsKeptForAWindow(t *testing.T, f Factory) {
	h := newHarness(t, f, basePolicy())
	h.advance(42 * time.Millisecond)
	bornAt := h.now()
	gen := h.closedGen()
	h.advance(500 * time.Millisecond)
	h.wantDecision("an Admit half a window later", h.admit("a"), allow, closed, gen)
	h.wantForgottenAt("born, then admitting calls only", h.forgetAt(bornAt), gen)
}

func testClosedScopeIdleForAWindowIsForgotten(t *testing.T, f Factory) {
	h := newHarness(t, f, basePolicy())
	h.halfOpen()
	h.advance(42 * time.Millisecond)
	gen := h.recover()
	// The closed generation is kept until the bucket it closed in has left
	// the window, so that calls admitted under it can still be recorded.
	h.wantForgottenAt("closed, with no outcome since", h.forgetAt(h.now()), gen)
}

func testClosedScopeIsKeptWhileItsWindowHoldsOutcomes(t *testing.T, f Factory) {
	h := newHarness(t, f, basePolicy())
	h.halfOpen()
	gen := h.recover()
	closedAt := h.now()
	h.advance(550 * time.Millisecond)
	h.record(ok(gen))
	forget := h.forgetAt(h.now())
	h.clock.Set(closedAt.Add(h.p.Window))
	if s := h.wantState("a window after closing, an outcome since", closed, gen); s.Calls != 1 {
		t.Errorf("snapshot %+v; want 1 call in the window", s)
	}
	h.wantForgottenAt("an outcome counted since closing", forget, gen)
}
