package coordinatortest

import (
	"testing"
	"time"
)

// Rule 3 of the contract (docs/architecture.md): a half-open breaker leases up to Probes probe
// slots, one per claim; a failed probe reopens it, enough successes close
// it, each in a new generation.

func testHalfOpenLimitsProbes(t *testing.T, f Factory) {
	h := newHarness(t, f, basePolicy())
	gen := h.halfOpen("a", "b")
	h.wantRejected("third probe of 2, for the time left on the leases", h.admit("c"), halfOpen, gen, 300*time.Millisecond)
	if s := h.snapshot(); s.ProbesInFlight != 2 {
		t.Errorf("snapshot %+v; want 2 probes in flight", s)
	}
}

func testHalfOpenExpiredLeaseFreesSlot(t *testing.T, f Factory) {
	h := newHarness(t, f, basePolicy())
	gen := h.halfOpen("a", "b")
	h.advance(299 * time.Millisecond)
	h.wantRejected("1ms before the leases end", h.admit("c"), halfOpen, gen, time.Millisecond)
	h.advance(time.Millisecond)
	h.wantDecision("when the leases end", h.admit("c"), probe, halfOpen, gen)
	if s := h.snapshot(); s.ProbesInFlight != 1 {
		t.Errorf("snapshot %+v; want 1 probe in flight: the expired leases are free", s)
	}
	res := h.settle("a", ok(gen))
	h.wantResult("settling an expired lease", res, halfOpen, gen, 1)
	if s := h.snapshot(); s.ProbeSuccesses != 0 {
		t.Errorf("snapshot %+v; an expired lease must not count as a success", s)
	}
}

func testHalfOpenSameClaimHoldsOneSlot(t *testing.T, f Factory) {
	h := newHarness(t, f, basePolicy())
	gen := h.halfOpen("a")
	h.advance(200 * time.Millisecond)
	d := h.admit("a")
	h.wantDecision("the same claim again", d, probe, halfOpen, gen)
	h.wantNoTransition("the same claim again", d.Transition)
	if s := h.snapshot(); s.ProbesInFlight != 1 {
		t.Errorf("snapshot %+v; want 1 probe in flight", s)
	}
	h.wantDecision("another claim", h.admit("b"), probe, halfOpen, gen)
	h.wantRejected("a third claim of 2 slots, until the first lease, not extended, ends", h.admit("c"), halfOpen, gen, 100*time.Millisecond)
}

func testHalfOpenSameClaimDoesNotExtendLease(t *testing.T, f Factory) {
	h := newHarness(t, f, basePolicy())
	gen := h.halfOpen("a")
	h.advance(200 * time.Millisecond)
	h.wantDecision("the same claim again", h.admit("a"), probe, halfOpen, gen)
	h.advance(100 * time.Millisecond)
	if s := h.snapshot(); s.ProbesInFlight != 0 {
		t.Errorf("snapshot %+v at the end of the first lease; want no probe in flight", s)
	}
	h.wantResult("settling after the first lease ended", h.settle("a", ok(gen)), halfOpen, gen, 1)
}

func testHalfOpenExpiredClaimIsNewClaim(t *testing.T, f Factory) {
	p := basePolicy()
	p.Probes = 1
	h := newHarness(t, f, p)
	gen := h.halfOpen("a")
	h.advance(300 * time.Millisecond)
	h.wantDecision("another claim once a's lease ended", h.admit("b"), probe, halfOpen, gen)
	h.wantRejected("the expired claim, slots full until b's lease ends", h.admit("a"), halfOpen, gen, 300*time.Millisecond)
	h.wantResult("settling b", h.settle("b", ok(gen)), halfOpen, gen, 0)
	h.wantDecision("the expired claim, a slot free", h.admit("a"), probe, halfOpen, gen)
	res := h.settle("a", ok(gen))
	h.wantResult("settling the renewed claim", res, closed, h.next(gen), 0)
	h.wantTransition("settling the renewed claim", res.Transition, halfOpen, closed, h.next(gen), "probes succeeded 2/2")
}

func testHalfOpenProbeFailureReopens(t *testing.T, f Factory) {
	h := newHarness(t, f, basePolicy())
	gen := h.halfOpen("a", "b")
	h.advance(50 * time.Millisecond)
	res := h.settle("a", fail(gen))
	reopened := h.next(gen)
	h.wantResult("a failed probe", res, open, reopened, 0)
	h.wantTransition("a failed probe", res.Transition, halfOpen, open, reopened, "probe failed")
	s := h.wantState("after the failed probe", open, reopened)
	if !s.OpenedAt.Equal(h.now()) || !s.OpenUntil.Equal(h.now().Add(100*time.Millisecond)) || s.ProbesInFlight != 0 {
		t.Errorf("snapshot %+v; want opened now (%v) for OpenFor (no MaxOpenFor), no probes in flight", s, h.now())
	}
	h.wantRejected("after the failed probe", h.admit("c"), open, reopened, 100*time.Millisecond)
}

func testHalfOpenProbeSuccessesClose(t *testing.T, f Factory) {
	h := newHarness(t, f, basePolicy())
	gen := h.halfOpen("a", "b")
	res := h.settle("a", ok(gen))
	h.wantResult("first success of 2", res, halfOpen, gen, 0)
	h.wantNoTransition("first success of 2", res.Transition)
	if s := h.snapshot(); s.ProbeSuccesses != 1 || s.ProbesInFlight != 1 {
		t.Errorf("snapshot %+v; want 1 probe success, 1 probe in flight", s)
	}
	res = h.settle("b", ok(gen))
	closedGen := h.next(gen)
	h.wantResult("second success of 2", res, closed, closedGen, 0)
	h.wantTransition("second success of 2", res.Transition, halfOpen, closed, closedGen, "probes succeeded 2/2")
	s := h.wantState("closed", closed, closedGen)
	if s.Calls != 0 || s.ProbesInFlight != 0 || s.ProbeSuccesses != 0 || !s.OpenUntil.IsZero() {
		t.Errorf("snapshot %+v; want an empty window, no probes and no OpenUntil", s)
	}
	h.wantDecision("closed", h.admit("c"), allow, closed, closedGen)
}

func testHalfOpenSettledSlotIsReused(t *testing.T, f Factory) {
	p := basePolicy()
	p.Probes, p.ProbeSuccesses = 1, 3
	h := newHarness(t, f, p)
	gen := h.halfOpen()
	for i, claim := range []string{"a", "b", "c"} {
		h.wantDecision("probe "+claim, h.admit(claim), probe, halfOpen, gen)
		res := h.settle(claim, ok(gen))
		if i < 2 {
			h.wantResult("success "+claim, res, halfOpen, gen, 0)
			continue
		}
		h.wantTransition("third success", res.Transition, halfOpen, closed, h.next(gen), "probes succeeded 3/3")
	}
}

func testHalfOpenSettleOfUnknownOrSettledClaimIsStale(t *testing.T, f Factory) {
	h := newHarness(t, f, basePolicy())
	gen := h.halfOpen("a")
	h.wantResult("an unknown claim", h.settle("nobody", ok(gen)), halfOpen, gen, 1)
	h.wantResult("a's success", h.settle("a", ok(gen)), halfOpen, gen, 0)
	res := h.settle("a", fail(gen))
	h.wantResult("a settled again", res, halfOpen, gen, 1)
	h.wantNoTransition("a settled again", res.Transition)
	if s := h.snapshot(); s.ProbeSuccesses != 1 || s.ProbesInFlight != 0 {
		t.Errorf("snapshot %+v; want 1 probe success and no probe in flight", s)
	}
}

func testHalfOpenRecordIsStale(t *testing.T, f Factory) {
	h := newHarness(t, f, basePolicy())
	gen := h.halfOpen("a")
	res := h.record(fail(gen), ok(gen), ok(gen-1))
	h.wantResult("Record while half-open", res, halfOpen, gen, 3)
	h.wantNoTransition("Record while half-open", res.Transition)
	if s := h.snapshot(); s.ProbeSuccesses != 0 || s.ProbesInFlight != 1 || s.Calls != 0 {
		t.Errorf("snapshot %+v; want the half-open state untouched", s)
	}
}

func testHalfOpenRejectRetryAfterIsEarliestLeaseEnd(t *testing.T, f Factory) {
	h := newHarness(t, f, basePolicy())
	gen := h.halfOpen("a")
	h.advance(100 * time.Millisecond)
	h.admit("b")
	h.advance(50 * time.Millisecond)
	h.wantRejected("slots full until a's lease ends", h.admit("c"), halfOpen, gen, 150*time.Millisecond)
	h.advance(150 * time.Millisecond)
	h.wantDecision("a's slot free", h.admit("c"), probe, halfOpen, gen)
	h.wantRejected("slots full until b's lease ends", h.admit("d"), halfOpen, gen, 100*time.Millisecond)
}

func testSlowProbeIsAFailedProbe(t *testing.T, f Factory) {
	p := basePolicy()
	p.SlowCallDuration, p.SlowCallRatio = 100*time.Millisecond, 0.5
	h := newHarness(t, f, p)
	gen := h.halfOpen("a", "b")
	h.wantResult("a fast probe", h.settle("a", took(gen, 99*time.Millisecond)), halfOpen, gen, 0)
	res := h.settle("b", took(gen, 100*time.Millisecond))
	h.wantResult("a slow probe", res, open, h.next(gen), 0)
	h.wantTransition("a slow probe", res.Transition, halfOpen, open, h.next(gen), "probe failed")
}
