package coordinatortest

import (
	"testing"
	"time"
)

// Rule 4 of the contract (docs/architecture.md): every new generation is
// implement.NextGeneration(previous, now), so generations only grow and
// are never handed out twice for one scope, even across forgetting; an
// outcome is counted only in the generation it was admitted under.

// testGenerationsFollowNextGeneration walks a scope through every
// transition that mints a generation, within one millisecond (previous +
// 1) and across milliseconds (now in ms × 1000); open -> half-open keeps
// the generation.
func testGenerationsFollowNextGeneration(t *testing.T, f Factory) {
	h := newHarness(t, f, basePolicy())
	var last uint64
	want := func(what string, got, want uint64) {
		t.Helper()
		if got != want || got < last {
			t.Errorf("%s: generation %d; want %d, after %d", what, got, want, last)
		}
		last = got
	}
	born := h.closedGen()
	want("birth", born, h.next(0))
	tripped := h.record(fail(born), fail(born), fail(born), fail(born)).Generation
	want("trip in the birth's millisecond", tripped, h.next(born))
	h.waitOpenPeriod()
	want("open -> half-open", h.admit("p").Generation, tripped)
	h.advance(10 * time.Millisecond)
	reopenedAt := h.now()
	reopened := h.settle("p", fail(tripped)).Generation
	want("probe failed 10ms later", reopened, h.next(tripped))
	h.waitOpenPeriod()
	h.admit("q")
	h.admit("r")
	h.settle("q", ok(reopened))
	closedGen := h.settle("r", ok(reopened)).Generation
	want("close", closedGen, h.next(reopened))
	want("trip in the close's millisecond", h.record(fail(closedGen), fail(closedGen), fail(closedGen), fail(closedGen)).Generation, h.next(closedGen))
	// Both arms of the rule were taken.
	if tripped != born+1 || reopened != uint64(reopenedAt.UnixMilli())*1000 {
		t.Errorf("generations %d, %d, %d: want +1 within a millisecond, the clock's milliseconds × 1000 across them", born, tripped, reopened)
	}
}

func testOutcomeOfPastGenerationIsStale(t *testing.T, f Factory) {
	h := newHarness(t, f, basePolicy())
	slow := h.admit("a call that outlives its generation").Generation
	gen := h.halfOpen("late")
	closedGen := h.recover()
	res := h.record(fail(slow))
	h.wantResult("outcome of the first closed generation in the next", res, closed, closedGen, 1)
	h.wantResult("probe of the half-open generation settled after closing", h.settle("late", fail(gen)), closed, closedGen, 1)
	if s := h.snapshot(); s.Calls != 0 || s.ConsecutiveFailures != 0 {
		t.Errorf("snapshot %+v; want nothing counted", s)
	}
}

func testSettleWithOlderGenerationIsStale(t *testing.T, f Factory) {
	h := newHarness(t, f, basePolicy())
	gen := h.halfOpen("a")
	h.wantResult("older generation", h.settle("a", fail(gen-1)), halfOpen, gen, 1)
	if s := h.snapshot(); s.ProbesInFlight != 1 {
		t.Errorf("snapshot %+v; a stale settlement must leave the lease alone", s)
	}
	h.wantResult("the probe's own generation", h.settle("a", ok(gen)), halfOpen, gen, 0)
	if s := h.snapshot(); s.ProbeSuccesses != 1 {
		t.Errorf("snapshot %+v; want 1 probe success", s)
	}
}

// testGenerationsNeverReusedAfterForgetting: a call admitted in the first
// generation (a long stream, say) outlives a trip, a recovery and an idle
// window. The scope is forgotten and born again above every generation it
// had, so the call's late failure, and more like it, count for nothing.
func testGenerationsNeverReusedAfterForgetting(t *testing.T, f Factory) {
	h := newHarness(t, f, basePolicy())
	long := h.admit("long stream").Generation
	h.halfOpen()
	h.advance(42 * time.Millisecond)
	closedGen := h.recover()
	h.forget(h.now())
	h.wantNotBorn("a window after the recovery")
	d := h.admit("a")
	h.wantDecision("born again", d, allow, closed, h.next(closedGen))
	res := h.record(fail(long), fail(long), fail(long), fail(long))
	h.wantResult("the long stream's failure and three more of its generation", res, closed, d.Generation, 4)
	h.wantNoTransition("the long stream's failure and three more of its generation", res.Transition)
	if s := h.snapshot(); s.Calls != 0 {
		t.Errorf("snapshot %+v; want nothing counted", s)
	}
}

// testOutcomeOfForgottenGenerationStaysStale: outcomes of the last
// generation before the scope was forgotten are stale even when their
// Record is what gives birth to it again.
func testOutcomeOfForgottenGenerationStaysStale(t *testing.T, f Factory) {
	h := newHarness(t, f, basePolicy())
	gen := h.closedGen()
	h.record(ok(gen))
	h.forget(h.now())
	h.wantNotBorn("a window after the last outcome")
	res := h.record(fail(gen), fail(gen), fail(gen), fail(gen))
	h.wantResult("outcomes of the forgotten generation", res, closed, h.next(gen), 4)
	h.wantNoTransition("outcomes of the forgotten generation", res.Transition)
	if s := h.wantState("born again by that Record", closed, h.next(gen)); s.Calls != 0 {
		t.Errorf("snapshot %+v; want nothing counted", s)
	}
}
