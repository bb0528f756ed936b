package coordinatortest

import (
	"errors"
	"testing"
	"time"

	"github.com/cbgrpc/cbgrpc/coordinator"
)

// The details both coordinators settle the same way (docs/architecture.md, the contract's rules): rounding
// of ratios, batches, probe leases at transitions, state as of now, stale
// counts, retried batches, invalid policies and the fields of a
// transition.

func testRatioRoundsToNearestThousandth(t *testing.T, f Factory) {
	p := basePolicy()
	p.MinCalls, p.FailureRatio = 3, 0.3334 // 333 thousandths: 1 of 3 is 333.3
	h := newHarness(t, f, p)
	gen := h.closedGen()
	h.wantTrip("1 of 3 at ratio 0.3334", gen, "failures 1/3 >= 33.3%", ok(gen), ok(gen), fail(gen))

	up := h.on(h.scope + "/up")
	up.p.FailureRatio = 0.3336 // 334 thousandths
	gen = up.closedGen()
	up.wantNoTrip("1 of 3 at ratio 0.3336", gen, ok(gen), ok(gen), fail(gen))
}

func testBatchedRecordAppliesOutcomesInOrder(t *testing.T, f Factory) {
	p := basePolicy()
	p.FailureRatio, p.MinCalls, p.ConsecutiveFailures = 0, 0, 2
	h := newHarness(t, f, p)
	gen := h.closedGen()
	h.wantNoTrip("failure, success, failure", gen, fail(gen), ok(gen), fail(gen))
	if s := h.snapshot(); s.ConsecutiveFailures != 1 || s.Failures != 2 {
		t.Errorf("snapshot %+v; want 2 failures, the last 1 in a row", s)
	}
	res := h.record(ok(gen), fail(gen), fail(gen), ok(gen), fail(gen))
	h.wantResult("success, failure, failure, ...", res, open, h.next(gen), 2)
	h.wantTransition("success, failure, failure, ...", res.Transition, closed, open, h.next(gen), "consecutive failures 2 >= 2")
}

func testRestOfBatchIsStaleAfterTrip(t *testing.T, f Factory) {
	h := newHarness(t, f, basePolicy())
	gen := h.closedGen()
	res := h.record(fail(gen), fail(gen), fail(gen), fail(gen), ok(gen), fail(gen))
	h.wantResult("a batch that trips at its fourth outcome", res, open, h.next(gen), 2)
	h.wantTransition("a batch that trips at its fourth outcome", res.Transition, closed, open, h.next(gen), "failures 4/4 >= 50%")
	if s := h.snapshot(); s.Calls != 0 || s.ConsecutiveFailures != 0 {
		t.Errorf("snapshot %+v; the rest of the batch belongs to the old generation", s)
	}
}

func testTransitionToOpenReleasesProbeLeases(t *testing.T, f Factory) {
	h := newHarness(t, f, basePolicy())
	gen := h.halfOpen("a", "b")
	reopened := h.settle("a", fail(gen)).Generation
	h.waitOpenPeriod() // b's lease would still be live
	h.wantDecision("first probe after reopening", h.admit("c"), probe, halfOpen, reopened)
	h.wantDecision("second probe after reopening", h.admit("d"), probe, halfOpen, reopened)
	h.wantResult("b, released by the reopening", h.settle("b", ok(reopened)), halfOpen, reopened, 1)
}

func testTransitionToClosedReleasesProbeLeases(t *testing.T, f Factory) {
	p := basePolicy()
	p.ProbeSuccesses = 1
	h := newHarness(t, f, p)
	gen := h.halfOpen("a", "b")
	closedGen := h.next(gen)
	h.wantTransition("a's success", h.settle("a", ok(gen)).Transition, halfOpen, closed, closedGen, "probes succeeded 1/1")
	h.wantResult("b after closing", h.settle("b", ok(gen)), closed, closedGen, 1)
	reopened := h.trip()
	h.waitOpenPeriod() // b's lease would still be live
	h.wantDecision("first probe after reopening", h.admit("c"), probe, halfOpen, reopened)
	h.wantDecision("second probe after reopening", h.admit("d"), probe, halfOpen, reopened)
}

func testStateIsAsOfNow(t *testing.T, f Factory) {
	h := newHarness(t, f, basePolicy())
	gen := h.trip()
	h.advance(100 * time.Millisecond)
	h.wantState("open period ended", halfOpen, gen)
	h.wantResult("Record after the open period", h.record(ok(gen)), halfOpen, gen, 1)
	h.wantResult("Settle after the open period", h.settle("nobody", ok(gen)), halfOpen, gen, 1)
	d := h.admit("a")
	h.wantTransition("first Admit after the open period", d.Transition, open, halfOpen, gen, "open period ended")
}

func testStaleCountsEveryIgnoredOutcome(t *testing.T, f Factory) {
	h := newHarness(t, f, basePolicy())
	first := h.closedGen()
	h.halfOpen()
	gen := h.recover()
	res := h.record(ok(first), fail(gen), ok(gen-1), fail(0), ok(gen))
	h.wantResult("3 of 5 from other generations", res, closed, gen, 3)
	if s := h.snapshot(); s.Calls != 2 {
		t.Errorf("snapshot %+v; want the 2 current outcomes counted", s)
	}
	gen = h.trip()
	h.wantResult("5 while open", h.record(ok(gen), ok(gen), ok(gen), ok(gen), ok(gen)), open, gen, 5)
	h.wantResult("an empty batch", h.record(), open, gen, 0)
	h.wantResult("a settlement while open", h.settle("nobody", ok(gen)), open, gen, 1)
}

func testDuplicateBatchIsStale(t *testing.T, f Factory) {
	h := newHarness(t, f, basePolicy())
	gen := h.closedGen()
	h.wantResult("batch-1", h.recordBatch("batch-1", fail(gen), ok(gen)), closed, gen, 0)
	res := h.recordBatch("batch-1", fail(gen), ok(gen))
	h.wantResult("batch-1 again", res, closed, gen, 2)
	if s := h.snapshot(); s.Calls != 2 || s.Failures != 1 {
		t.Errorf("snapshot %+v; want batch-1 counted once", s)
	}
	h.wantResult("batch-2", h.recordBatch("batch-2", ok(gen)), closed, gen, 0)
	h.record(ok(gen))
	h.record(ok(gen))
	if s := h.snapshot(); s.Calls != 5 {
		t.Errorf("snapshot %+v; want 5 calls: batch-2 and two batches without an ID count", s)
	}
	other := h.on(h.scope + "/other")
	gen = other.closedGen()
	other.wantResult("batch-1 on another scope", other.recordBatch("batch-1", ok(gen)), closed, gen, 0)
}

func testInvalidPolicyIsAnError(t *testing.T, f Factory) {
	h := newHarness(t, f, basePolicy())
	bad := basePolicy()
	bad.Probes = 0
	ctx := t.Context()
	check := func(op string, err error) {
		t.Helper()
		if !errors.Is(err, coordinator.ErrInvalidPolicy) {
			t.Errorf("%s with Probes 0: error %v; want one wrapping coordinator.ErrInvalidPolicy", op, err)
		}
	}
	_, err := h.c.Admit(ctx, coordinator.AdmitRequest{Scope: h.scope, Policy: bad, Claim: "a"})
	check("Admit", err)
	_, err = h.c.Record(ctx, coordinator.RecordRequest{Scope: h.scope, Policy: bad, Outcomes: []coordinator.Outcome{fail(0), fail(0), fail(0), fail(0)}})
	check("Record", err)
	_, err = h.c.Settle(ctx, coordinator.SettleRequest{Scope: h.scope, Policy: bad, Claim: "a", Outcome: fail(0)})
	check("Settle", err)
	_, err = h.c.Snapshot(ctx, h.scope, bad)
	check("Snapshot", err)
	h.wantNotBorn("after operations with an invalid policy, which must change nothing")
}

func testTransitionFields(t *testing.T, f Factory) {
	h := newHarness(t, f, basePolicy())
	// Sub-millisecond clock readings: At is the clock in whole milliseconds.
	h.advance(1234567 * time.Nanosecond)
	gen := h.closedGen()
	res := h.record(fail(gen), ok(gen), ok(gen), fail(gen))
	h.wantTransition("trip", res.Transition, closed, open, h.next(gen), "failures 2/4 >= 50%")
	gen = res.Generation
	h.waitOpenPeriod()
	h.advance(700 * time.Microsecond)
	d := h.admit("a")
	h.wantTransition("open period ended", d.Transition, open, halfOpen, gen, "open period ended")
	h.advance(10*time.Millisecond + 999*time.Microsecond)
	res = h.settle("a", fail(gen))
	h.wantTransition("probe failed", res.Transition, halfOpen, open, h.next(gen), "probe failed")
	gen = res.Generation
	h.waitOpenPeriod()
	h.admit("b")
	h.admit("c")
	h.settle("b", ok(gen))
	h.advance(time.Microsecond)
	res = h.settle("c", ok(gen))
	h.wantTransition("probes succeeded", res.Transition, halfOpen, closed, h.next(gen), "probes succeeded 2/2")
}

// testLongBatchTripsWhereTheRulesFirstHold: a long batch of successes
// trips the breaker at the success that brings the calls to MinCalls, if
// the failures already reach the ratio there, and the rest of it is
// stale; a batch of successes under a policy whose rules already hold
// trips at its first success. (A coordinator may count a run of equal
// outcomes at once, but only where it gets the same answer.)
func testLongBatchTripsWhereTheRulesFirstHold(t *testing.T, f Factory) {
	p := basePolicy()
	p.MinCalls, p.FailureRatio = 20, 0.5
	h := newHarness(t, f, p)
	gen := h.closedGen()
	var batch []coordinator.Outcome
	for range 10 {
		batch = append(batch, fail(gen))
	}
	h.wantNoTrip("10 failures, under MinCalls", gen, batch...)
	batch = batch[:0]
	for range 30 {
		batch = append(batch, ok(gen))
	}
	res := h.record(batch...)
	h.wantResult("30 successes after 10 failures", res, open, h.next(gen), 20)
	h.wantTransition("30 successes after 10 failures", res.Transition, closed, open, h.next(gen), "failures 10/20 >= 50%")

	loose := basePolicy()
	loose.MinCalls, loose.FailureRatio = 1000, 0.5
	h = newHarness(t, f, loose).on("policy-changed")
	gen = h.closedGen()
	batch = batch[:0]
	for i := range 15 {
		batch = append(batch, coordinator.Outcome{Generation: gen, Failure: i < 10})
	}
	h.wantNoTrip("10 failures of 15, under MinCalls 1000", gen, batch...)
	h.p.MinCalls = 10
	batch = batch[:0]
	for range 50 {
		batch = append(batch, ok(gen))
	}
	res = h.record(batch...)
	h.wantResult("50 successes under MinCalls 10", res, open, h.next(gen), 49)
	h.wantTransition("50 successes under MinCalls 10", res.Transition, closed, open, h.next(gen), "failures 10/16 >= 50%")
}
