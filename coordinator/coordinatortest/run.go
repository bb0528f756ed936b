package coordinatortest

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cbgrpc/cbgrpc/coordinator"
)

// Factory makes the coordinator under test for one subtest. The coordinator
// must read its time from clock, once per operation, and must not share
// state with coordinators made for other subtests unless scopes keep them
// apart (every subtest uses scopes of its own, except ScopesAreOpaque).
type Factory func(t *testing.T, clock func() time.Time) coordinator.Coordinator

const (
	closed   = coordinator.StateClosed
	open     = coordinator.StateOpen
	halfOpen = coordinator.StateHalfOpen

	allow  = coordinator.Allow
	probe  = coordinator.Probe
	reject = coordinator.Reject
)

// Run checks that the coordinators newCoordinator makes keep the breaker
// contract: one subtest per rule, each on a fresh coordinator and a fake
// clock, and then [Compare] against the in-process coordinator.
func Run(t *testing.T, newCoordinator Factory) {
	for _, r := range rules {
		t.Run(r.name, func(t *testing.T) { r.test(t, newCoordinator) })
	}
	t.Run("Compare", func(t *testing.T) { Compare(t, newCoordinator, CompareOptions{}) })
}

var rules = []struct {
	name string
	test func(*testing.T, Factory)
}{
	// closed
	{"ClosedAdmitsWithCurrentGeneration", testClosedAdmitsWithCurrentGeneration},
	{"ClosedCountsOutcomesOfCurrentGeneration", testClosedCountsOutcomesOfCurrentGeneration},
	{"ClosedTripsOnFailureRatio", testClosedTripsOnFailureRatio},
	{"ClosedRatioNeedsMinCalls", testClosedRatioNeedsMinCalls},
	{"ClosedTripsOnConsecutiveFailures", testClosedTripsOnConsecutiveFailures},
	{"ClosedSuccessResetsConsecutiveFailures", testClosedSuccessResetsConsecutiveFailures},
	{"ClosedTripsOnSlowCallRatio", testClosedTripsOnSlowCallRatio},
	// open
	{"OpenRejectsUntilOpenPeriodEnds", testOpenRejectsUntilOpenPeriodEnds},
	{"OpenMovesToHalfOpenOnFirstAdmitAfterPeriod", testOpenMovesToHalfOpenOnFirstAdmitAfterPeriod},
	{"LookingNeverUsesUpAProbe", testLookingNeverUsesUpAProbe},
	{"OpenRecordIsStale", testOpenRecordIsStale},
	// half-open
	{"HalfOpenLimitsProbes", testHalfOpenLimitsProbes},
	{"HalfOpenExpiredLeaseFreesSlot", testHalfOpenExpiredLeaseFreesSlot},
	{"HalfOpenSameClaimHoldsOneSlot", testHalfOpenSameClaimHoldsOneSlot},
	{"HalfOpenSameClaimDoesNotExtendLease", testHalfOpenSameClaimDoesNotExtendLease},
	{"HalfOpenExpiredClaimIsNewClaim", testHalfOpenExpiredClaimIsNewClaim},
	{"HalfOpenProbeFailureReopens", testHalfOpenProbeFailureReopens},
	{"HalfOpenProbeSuccessesClose", testHalfOpenProbeSuccessesClose},
	{"HalfOpenSettledSlotIsReused", testHalfOpenSettledSlotIsReused},
	{"HalfOpenSettleOfUnknownOrSettledClaimIsStale", testHalfOpenSettleOfUnknownOrSettledClaimIsStale},
	{"HalfOpenRecordIsStale", testHalfOpenRecordIsStale},
	{"HalfOpenRejectRetryAfterIsEarliestLeaseEnd", testHalfOpenRejectRetryAfterIsEarliestLeaseEnd},
	{"SlowProbeIsAFailedProbe", testSlowProbeIsAFailedProbe},
	{"OpenPeriodDoublesUpToMaxOpenFor", testOpenPeriodDoublesUpToMaxOpenFor},
	// generations
	{"GenerationsOnlyGrow", testGenerationsOnlyGrow},
	{"OutcomeOfPastGenerationIsStale", testOutcomeOfPastGenerationIsStale},
	{"NewerGenerationIsStale", testNewerGenerationIsStale},
	{"SettleWithOtherGenerationIsStale", testSettleWithOtherGenerationIsStale},
	// lost state, as far as the interface shows it
	{"LostStateStartsClosedAndAdoptsNothing", testLostStateStartsClosedAndAdoptsNothing},
	// expiry
	{"OpenStateNeverExpires", testOpenStateNeverExpires},
	{"HalfOpenStateNeverExpires", testHalfOpenStateNeverExpires},
	{"ClosedScopeIdleForAWindowIsForgotten", testClosedScopeIdleForAWindowIsForgotten},
	{"ClosedScopeIsKeptWhileItsWindowHoldsOutcomes", testClosedScopeIsKeptWhileItsWindowHoldsOutcomes},
	// scopes
	{"ScopesAreOpaque", testScopesAreOpaque},
	{"DifferentScopesNeverInterfere", testDifferentScopesNeverInterfere},
	// details both coordinators settle the same way
	{"RatioRoundsToNearestThousandth", testRatioRoundsToNearestThousandth},
	{"BatchedRecordAppliesOutcomesInOrder", testBatchedRecordAppliesOutcomesInOrder},
	{"RestOfBatchIsStaleAfterTrip", testRestOfBatchIsStaleAfterTrip},
	{"TransitionToOpenReleasesProbeLeases", testTransitionToOpenReleasesProbeLeases},
	{"TransitionToClosedReleasesProbeLeases", testTransitionToClosedReleasesProbeLeases},
	{"StateIsAsOfNow", testStateIsAsOfNow},
	{"StaleCountsEveryIgnoredOutcome", testStaleCountsEveryIgnoredOutcome},
	{"DuplicateBatchIsStale", testDuplicateBatchIsStale},
	{"InvalidPolicyIsAnError", testInvalidPolicyIsAnError},
	{"TransitionFields", testTransitionFields},
	// the optional transition feed
	{"WatchDeliversTransitionsOfFollowedScopes", testWatchDeliversTransitionsOfFollowedScopes},
	// the optional manual control (control.go)
	{"IsolateRejectsEveryAdmit", testIsolateRejectsEveryAdmit},
	{"IsolateForExpiresByItself", testIsolateForExpiresByItself},
	{"ReleaseClosesWithNewGeneration", testReleaseClosesWithNewGeneration},
	{"DisableAllowsAndNeverTrips", testDisableAllowsAndNeverTrips},
	{"EnableRestoresNormalRules", testEnableRestoresNormalRules},
	{"ManualStatesNeverExpire", testManualStatesNeverExpire},
	{"ManualStatesAreTransitions", testManualStatesAreTransitions},
	{"InvalidNoteIsAnError", testInvalidNoteIsAnError},
}

func testClosedAdmitsWithCurrentGeneration(t *testing.T, f Factory) {
	h := newHarness(t, f, basePolicy())
	d := h.admit("a")
	h.wantDecision("fresh scope", d, allow, closed, 0)
	if d.RetryAfter != 0 || d.Transition != nil {
		t.Errorf("fresh scope: Admit = %+v; want no RetryAfter and no transition", d)
	}
	h.halfOpen()
	gen := h.recover()
	h.wantDecision("closed again", h.admit("b"), allow, closed, gen)
}

func testClosedCountsOutcomesOfCurrentGeneration(t *testing.T, f Factory) {
	h := newHarness(t, f, basePolicy())
	res := h.record(ok(0), fail(0))
	h.wantResult("two outcomes of generation 0", res, closed, 0, 0)
	h.wantNoTransition("two outcomes of generation 0", res.Transition)
	s := h.snapshot()
	if s.Calls != 2 || s.Failures != 1 || s.Slow != 0 || s.ConsecutiveFailures != 1 {
		t.Errorf("snapshot %+v; want 2 calls, 1 failure, 0 slow, 1 consecutive failure", s)
	}
}

func testClosedTripsOnFailureRatio(t *testing.T, f Factory) {
	h := newHarness(t, f, basePolicy())
	res := h.record(fail(0), ok(0), ok(0))
	h.wantResult("1 failure of 3", res, closed, 0, 0)
	h.wantNoTransition("1 failure of 3", res.Transition)
	h.advance(10 * time.Millisecond)
	res = h.record(fail(0))
	h.wantResult("2 failures of 4", res, open, 1, 0)
	h.wantTransition("2 failures of 4", res.Transition, closed, open, 1, "failures 2/4 >= 50%")
	s := h.wantState("after the trip", open, 1)
	if !s.OpenedAt.Equal(h.now()) || !s.OpenUntil.Equal(h.now().Add(h.p.OpenFor)) {
		t.Errorf("snapshot opened at %v until %v; want %v until %v", s.OpenedAt, s.OpenUntil, h.now(), h.now().Add(h.p.OpenFor))
	}
	if s.Calls != 0 || s.Failures != 0 {
		t.Errorf("snapshot %+v: the new generation's window must be empty", s)
	}
}

func testClosedRatioNeedsMinCalls(t *testing.T, f Factory) {
	h := newHarness(t, f, basePolicy())
	res := h.record(fail(0), fail(0), fail(0))
	h.wantResult("3 failures of 3, MinCalls 4", res, closed, 0, 0)
	h.wantNoTransition("3 failures of 3, MinCalls 4", res.Transition)
	res = h.record(ok(0))
	h.wantTransition("3 failures of 4", res.Transition, closed, open, 1, "failures 3/4 >= 50%")
}

func testClosedTripsOnConsecutiveFailures(t *testing.T, f Factory) {
	p := basePolicy()
	p.FailureRatio, p.MinCalls, p.ConsecutiveFailures = 0, 0, 3
	h := newHarness(t, f, p)
	h.record(fail(0), fail(0))
	if s := h.wantState("2 failures in a row", closed, 0); s.ConsecutiveFailures != 2 {
		t.Errorf("snapshot %+v; want 2 consecutive failures", s)
	}
	res := h.record(fail(0))
	h.wantResult("3 failures in a row", res, open, 1, 0)
	h.wantTransition("3 failures in a row", res.Transition, closed, open, 1, "consecutive failures 3 >= 3")
}

func testClosedSuccessResetsConsecutiveFailures(t *testing.T, f Factory) {
	p := basePolicy()
	p.FailureRatio, p.MinCalls, p.ConsecutiveFailures = 0, 0, 3
	h := newHarness(t, f, p)
	res := h.record(fail(0), fail(0), ok(0), fail(0), fail(0), ok(0), fail(0), fail(0))
	h.wantResult("never 3 failures in a row", res, closed, 0, 0)
	if s := h.snapshot(); s.ConsecutiveFailures != 2 || s.Calls != 8 {
		t.Errorf("snapshot %+v; want 8 calls ending in 2 consecutive failures", s)
	}
	res = h.record(fail(0))
	h.wantTransition("third failure in a row", res.Transition, closed, open, 1, "consecutive failures 3 >= 3")
}

func testClosedTripsOnSlowCallRatio(t *testing.T, f Factory) {
	p := basePolicy()
	p.FailureRatio = 0
	p.SlowCallDuration, p.SlowCallRatio = 100*time.Millisecond, 0.5
	h := newHarness(t, f, p)
	res := h.record(took(0, 99*time.Millisecond), took(0, 100*time.Millisecond), took(0, time.Millisecond))
	h.wantResult("1 slow call of 3", res, closed, 0, 0)
	if s := h.snapshot(); s.Calls != 3 || s.Slow != 1 || s.Failures != 0 {
		t.Errorf("snapshot %+v; want 3 calls, 1 slow (a call of exactly SlowCallDuration is slow)", s)
	}
	res = h.record(took(0, time.Second))
	h.wantResult("2 slow calls of 4", res, open, 1, 0)
	h.wantTransition("2 slow calls of 4", res.Transition, closed, open, 1, "slow calls 2/4 >= 50%")
}

func testOpenRejectsUntilOpenPeriodEnds(t *testing.T, f Factory) {
	h := newHarness(t, f, basePolicy())
	gen := h.trip()
	h.advance(40 * time.Millisecond)
	d := h.admit("a")
	h.wantDecision("40ms into a 100ms open period", d, reject, open, gen)
	if d.RetryAfter != 60*time.Millisecond || d.Transition != nil {
		t.Errorf("40ms into a 100ms open period: Admit = %+v; want RetryAfter 60ms, no transition", d)
	}
	h.advance(59 * time.Millisecond)
	d = h.admit("a")
	h.wantDecision("1ms before the end", d, reject, open, gen)
	if d.RetryAfter != time.Millisecond {
		t.Errorf("1ms before the end: RetryAfter %v; want 1ms", d.RetryAfter)
	}
	h.wantState("1ms before the end", open, gen)
}

func testOpenMovesToHalfOpenOnFirstAdmitAfterPeriod(t *testing.T, f Factory) {
	h := newHarness(t, f, basePolicy())
	gen := h.trip()
	openedAt := h.now()
	h.advance(100 * time.Millisecond)
	d := h.admit("a")
	h.wantDecision("first admission after the open period", d, probe, halfOpen, gen)
	h.wantTransition("first admission after the open period", d.Transition, open, halfOpen, gen, "open period ended")
	s := h.wantState("after the first probe", halfOpen, gen)
	if s.ProbesInFlight != 1 || !s.OpenedAt.Equal(openedAt) || !s.OpenUntil.Equal(openedAt.Add(100*time.Millisecond)) {
		t.Errorf("snapshot %+v; want 1 probe in flight, opened at %v until %v", s, openedAt, openedAt.Add(100*time.Millisecond))
	}
	d = h.admit("b")
	h.wantDecision("second probe", d, probe, halfOpen, gen)
	h.wantNoTransition("second probe", d.Transition)
}

func testLookingNeverUsesUpAProbe(t *testing.T, f Factory) {
	p := basePolicy()
	p.Probes = 1
	h := newHarness(t, f, p)
	gen := h.trip()
	h.advance(100 * time.Millisecond)
	for range 3 {
		if s := h.wantState("looking after the open period", halfOpen, gen); s.ProbesInFlight != 0 {
			t.Errorf("snapshot %+v; want no probe in flight", s)
		}
	}
	d := h.admit("a")
	h.wantDecision("the only probe", d, probe, halfOpen, gen)
	h.wantTransition("the only probe", d.Transition, open, halfOpen, gen, "open period ended")
	h.wantDecision("a second caller", h.admit("b"), reject, halfOpen, gen)
}

func testOpenRecordIsStale(t *testing.T, f Factory) {
	h := newHarness(t, f, basePolicy())
	gen := h.trip()
	res := h.record(fail(gen), ok(gen), fail(gen-1))
	h.wantResult("Record while open", res, open, gen, 3)
	h.wantNoTransition("Record while open", res.Transition)
	if s := h.snapshot(); s.Calls != 0 || s.ConsecutiveFailures != 0 {
		t.Errorf("snapshot %+v; want nothing counted", s)
	}
}

func testHalfOpenLimitsProbes(t *testing.T, f Factory) {
	h := newHarness(t, f, basePolicy())
	gen := h.halfOpen("a", "b")
	d := h.admit("c")
	h.wantDecision("third probe of 2", d, reject, halfOpen, gen)
	if d.RetryAfter != 300*time.Millisecond {
		t.Errorf("third probe of 2: RetryAfter %v; want 300ms, the time left on the leases", d.RetryAfter)
	}
	if s := h.snapshot(); s.ProbesInFlight != 2 {
		t.Errorf("snapshot %+v; want 2 probes in flight", s)
	}
}

func testHalfOpenExpiredLeaseFreesSlot(t *testing.T, f Factory) {
	h := newHarness(t, f, basePolicy())
	gen := h.halfOpen("a", "b")
	h.advance(299 * time.Millisecond)
	d := h.admit("c")
	h.wantDecision("1ms before the leases end", d, reject, halfOpen, gen)
	if d.RetryAfter != time.Millisecond {
		t.Errorf("1ms before the leases end: RetryAfter %v; want 1ms", d.RetryAfter)
	}
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
	d = h.admit("c")
	h.wantDecision("a third claim of 2 slots", d, reject, halfOpen, gen)
	if d.RetryAfter != 100*time.Millisecond {
		t.Errorf("RetryAfter %v; want 100ms: the first lease must not have been extended", d.RetryAfter)
	}
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
	d := h.admit("a")
	h.wantDecision("the expired claim, slots full", d, reject, halfOpen, gen)
	if d.RetryAfter != 300*time.Millisecond {
		t.Errorf("the expired claim: RetryAfter %v; want 300ms (b's lease)", d.RetryAfter)
	}
	h.wantResult("settling b", h.settle("b", ok(gen)), halfOpen, gen, 0)
	h.wantDecision("the expired claim, a slot free", h.admit("a"), probe, halfOpen, gen)
	res := h.settle("a", ok(gen))
	h.wantResult("settling the renewed claim", res, closed, gen+1, 0)
	h.wantTransition("settling the renewed claim", res.Transition, halfOpen, closed, gen+1, "probes succeeded 2/2")
}

func testHalfOpenProbeFailureReopens(t *testing.T, f Factory) {
	h := newHarness(t, f, basePolicy())
	gen := h.halfOpen("a", "b")
	h.advance(50 * time.Millisecond)
	res := h.settle("a", fail(gen))
	h.wantResult("a failed probe", res, open, gen+1, 0)
	h.wantTransition("a failed probe", res.Transition, halfOpen, open, gen+1, "probe failed")
	s := h.wantState("after the failed probe", open, gen+1)
	if !s.OpenedAt.Equal(h.now()) || !s.OpenUntil.Equal(h.now().Add(100*time.Millisecond)) || s.ProbesInFlight != 0 {
		t.Errorf("snapshot %+v; want opened now (%v) for OpenFor (no MaxOpenFor), no probes in flight", s, h.now())
	}
	d := h.admit("c")
	h.wantDecision("after the failed probe", d, reject, open, gen+1)
	if d.RetryAfter != 100*time.Millisecond {
		t.Errorf("after the failed probe: RetryAfter %v; want 100ms", d.RetryAfter)
	}
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
	h.wantResult("second success of 2", res, closed, gen+1, 0)
	h.wantTransition("second success of 2", res.Transition, halfOpen, closed, gen+1, "probes succeeded 2/2")
	s := h.wantState("closed", closed, gen+1)
	if s.Calls != 0 || s.ProbesInFlight != 0 || s.ProbeSuccesses != 0 || !s.OpenUntil.IsZero() {
		t.Errorf("snapshot %+v; want an empty window, no probes and no OpenUntil", s)
	}
	h.wantDecision("closed", h.admit("c"), allow, closed, gen+1)
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
		h.wantTransition("third success", res.Transition, halfOpen, closed, gen+1, "probes succeeded 3/3")
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
	d := h.admit("c")
	h.wantDecision("slots full", d, reject, halfOpen, gen)
	if d.RetryAfter != 150*time.Millisecond {
		t.Errorf("RetryAfter %v; want 150ms, until a's lease ends", d.RetryAfter)
	}
	h.advance(150 * time.Millisecond)
	h.wantDecision("a's slot free", h.admit("c"), probe, halfOpen, gen)
	d = h.admit("d")
	if d.Verdict != reject || d.RetryAfter != 100*time.Millisecond {
		t.Errorf("Admit = %+v; want Reject with RetryAfter 100ms, until b's lease ends", d)
	}
}

func testSlowProbeIsAFailedProbe(t *testing.T, f Factory) {
	p := basePolicy()
	p.SlowCallDuration, p.SlowCallRatio = 100*time.Millisecond, 0.5
	h := newHarness(t, f, p)
	gen := h.halfOpen("a", "b")
	h.wantResult("a fast probe", h.settle("a", took(gen, 99*time.Millisecond)), halfOpen, gen, 0)
	res := h.settle("b", took(gen, 100*time.Millisecond))
	h.wantResult("a slow probe", res, open, gen+1, 0)
	h.wantTransition("a slow probe", res.Transition, halfOpen, open, gen+1, "probe failed")
}

func testOpenPeriodDoublesUpToMaxOpenFor(t *testing.T, f Factory) {
	p := basePolicy()
	p.MaxOpenFor = 350 * time.Millisecond
	h := newHarness(t, f, p)
	wantPeriod := func(what string, want time.Duration) {
		t.Helper()
		s := h.snapshot()
		if got := s.OpenUntil.Sub(s.OpenedAt); got != want || !s.OpenedAt.Equal(h.now()) {
			t.Errorf("%s: open from %v for %v; want from now (%v) for %v", what, s.OpenedAt, got, h.now(), want)
		}
		if d := h.admit("early"); d.Verdict != reject || d.RetryAfter != want {
			t.Errorf("%s: Admit = %+v; want Reject with RetryAfter %v", what, d, want)
		}
	}
	gen := h.trip()
	wantPeriod("first trip", 100*time.Millisecond)
	for i, want := range []time.Duration{200 * time.Millisecond, 350 * time.Millisecond, 350 * time.Millisecond} {
		h.waitOpenPeriod()
		claim := fmt.Sprintf("probe-%d", i)
		h.wantDecision("probe", h.admit(claim), probe, halfOpen, gen)
		res := h.settle(claim, fail(gen))
		gen++
		h.wantResult("failed probe", res, open, gen, 0)
		wantPeriod(fmt.Sprintf("after failed probe %d", i+1), want)
	}
	h.waitOpenPeriod()
	h.recover()
	h.trip()
	wantPeriod("first trip after closing", 100*time.Millisecond)
}

func testGenerationsOnlyGrow(t *testing.T, f Factory) {
	h := newHarness(t, f, basePolicy())
	var seen []uint64
	see := func(g uint64) {
		if n := len(seen); n > 0 && g < seen[n-1] {
			t.Errorf("generation went from %d to %d (seen %v)", seen[n-1], g, seen)
		}
		seen = append(seen, g)
	}
	see(h.admit("a").Generation)
	see(h.trip())
	h.waitOpenPeriod()
	see(h.admit("p").Generation)
	see(h.settle("p", fail(seen[len(seen)-1])).Generation)
	h.waitOpenPeriod()
	see(h.admit("q").Generation)
	see(h.recover())
	see(h.snapshot().Generation)
	if want := []uint64{0, 1, 1, 2, 2, 3, 3}; !equalGens(seen, want) {
		t.Errorf("generations %v; want %v: +1 on every transition to open or closed", seen, want)
	}
}

func equalGens(a, b []uint64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func testOutcomeOfPastGenerationIsStale(t *testing.T, f Factory) {
	h := newHarness(t, f, basePolicy())
	h.wantDecision("a call that outlives the generation", h.admit("slow"), allow, closed, 0)
	gen := h.halfOpen("late")
	closedGen := h.recover()
	res := h.record(fail(0))
	h.wantResult("outcome of generation 0 in generation 2", res, closed, closedGen, 1)
	h.wantResult("probe of generation 1 settled in generation 2", h.settle("late", fail(gen)), closed, closedGen, 1)
	if s := h.snapshot(); s.Calls != 0 || s.ConsecutiveFailures != 0 {
		t.Errorf("snapshot %+v; want nothing counted", s)
	}
}

func testNewerGenerationIsStale(t *testing.T, f Factory) {
	h := newHarness(t, f, basePolicy())
	res := h.record(fail(1), fail(1), fail(1), fail(1))
	h.wantResult("outcomes of generation 1 in generation 0", res, closed, 0, 4)
	h.wantNoTransition("outcomes of generation 1 in generation 0", res.Transition)
	gen := h.halfOpen("a")
	h.wantResult("probe settled with a newer generation", h.settle("a", fail(gen+1)), halfOpen, gen, 1)
}

func testSettleWithOtherGenerationIsStale(t *testing.T, f Factory) {
	h := newHarness(t, f, basePolicy())
	gen := h.halfOpen("a")
	h.wantResult("older generation", h.settle("a", fail(gen-1)), halfOpen, gen, 1)
	h.wantResult("newer generation", h.settle("a", fail(gen+1)), halfOpen, gen, 1)
	if s := h.snapshot(); s.ProbesInFlight != 1 {
		t.Errorf("snapshot %+v; a stale settlement must leave the lease alone", s)
	}
	h.wantResult("the probe's own generation", h.settle("a", ok(gen)), halfOpen, gen, 0)
	if s := h.snapshot(); s.ProbeSuccesses != 1 {
		t.Errorf("snapshot %+v; want 1 probe success", s)
	}
}

func testLostStateStartsClosedAndAdoptsNothing(t *testing.T, f Factory) {
	h := newHarness(t, f, basePolicy())
	s := h.snapshot()
	if s != (coordinator.Snapshot{Scope: h.scope}) {
		t.Errorf("snapshot of a scope with no state: %+v; want closed in generation 0 with nothing counted", s)
	}
	res := h.record(fail(1), fail(7), fail(1<<40), fail(^uint64(0)))
	h.wantResult("outcomes of generations the scope never issued", res, closed, 0, 4)
	h.wantResult("a probe the scope never admitted", h.settle("ghost", fail(1)), closed, 0, 1)
	if s := h.snapshot(); s.Calls != 0 {
		t.Errorf("snapshot %+v; want nothing counted", s)
	}
}

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
	h.wantTransition("second success", h.settle("b", ok(gen)).Transition, halfOpen, closed, gen+1, "probes succeeded 2/2")
}

func testClosedScopeIdleForAWindowIsForgotten(t *testing.T, f Factory) {
	h := newHarness(t, f, basePolicy())
	h.halfOpen()
	h.advance(42 * time.Millisecond)
	gen := h.recover()
	// The closed generation is kept until the bucket it closed in has left
	// the window, so that calls admitted under it can still be recorded.
	forget := h.now().Truncate(h.p.BucketWidth()).Add(h.p.Window)
	h.clock.Set(forget.Add(-time.Millisecond))
	h.wantState("1ms before a whole window without outcomes", closed, gen)
	h.clock.Set(forget)
	s := h.snapshot()
	if s != (coordinator.Snapshot{Scope: h.scope}) {
		t.Errorf("snapshot after a whole window without outcomes: %+v; want a forgotten scope: closed in generation 0", s)
	}
	h.wantDecision("a forgotten scope", h.admit("a"), allow, closed, 0)
}

func testClosedScopeIsKeptWhileItsWindowHoldsOutcomes(t *testing.T, f Factory) {
	h := newHarness(t, f, basePolicy())
	h.halfOpen()
	gen := h.recover()
	closedAt := h.now()
	h.advance(550 * time.Millisecond)
	h.record(ok(gen))
	forget := h.now().Truncate(h.p.BucketWidth()).Add(h.p.Window)
	h.clock.Set(closedAt.Add(h.p.Window))
	if s := h.wantState("a window after closing, an outcome since", closed, gen); s.Calls != 1 {
		t.Errorf("snapshot %+v; want 1 call in the window", s)
	}
	h.clock.Set(forget.Add(-time.Millisecond))
	h.wantState("1ms before the outcome's bucket leaves the window", closed, gen)
	h.clock.Set(forget)
	if s := h.wantState("when the outcome's bucket leaves the window", closed, 0); s.Calls != 0 {
		t.Errorf("snapshot %+v; want nothing counted", s)
	}
}

// opaqueScopes are scope names that a coordinator might mangle or confuse:
// empty, control bytes, key separators, Redis Cluster hash tags, invalid
// UTF-8, and two 1 MiB names that differ in their last byte.
func opaqueScopes() []string {
	big := strings.Repeat("s", 1<<20)
	return []string{
		"", " ", "\x00", "\n", "{", "}", "{}", "{a}", "a", "a}", "{a", "a|b", "a|", "|a", "a:state", "a\x00state",
		"line\nbreak\r\n", "tab\there", "ünïcødé/服务/🚦", "\xff\xfe not utf-8",
		big, big[:len(big)-1] + "t",
	}
}

func testScopesAreOpaque(t *testing.T, f Factory) {
	h := newHarness(t, f, basePolicy())
	scopes := opaqueScopes()
	for i, scope := range scopes {
		hs := h.on(scope)
		res := hs.record(fail(0), fail(0), fail(0), fail(0))
		hs.wantTransition("tripping scope "+trim(scope), res.Transition, closed, open, 1, "failures 4/4 >= 50%")
		for j, other := range scopes {
			s := h.on(other).snapshot()
			want, gen := open, uint64(1)
			if j > i {
				want, gen = closed, 0
			}
			if s.Scope != other || s.State != want || s.Generation != gen {
				t.Fatalf("after tripping scopes 0..%d (last %s): snapshot of scope %d (%s) is %s of %s in %v, generation %d; want itself in %v, generation %d",
					i, trim(scope), j, trim(other), trim(s.Scope), trim(other), s.State, s.Generation, want, gen)
			}
		}
	}
}

// trim quotes a scope for a message, shortening 1 MiB names.
func trim(s string) string {
	if len(s) > 40 {
		return fmt.Sprintf("%q... (%d bytes)", s[:20], len(s))
	}
	return strconv.Quote(s)
}

func testDifferentScopesNeverInterfere(t *testing.T, f Factory) {
	h := newHarness(t, f, basePolicy())
	a, b := h.on(h.scope+"/{x}"), h.on(h.scope+"/x")
	a.record(fail(0), fail(0), fail(0))
	b.record(fail(0), fail(0), fail(0))
	for _, hs := range []*harness{a, b} {
		if s := hs.wantState("3 failures each", closed, 0); s.Calls != 3 {
			t.Errorf("snapshot %+v; want 3 calls: windows are per scope", s)
		}
	}
	a.wantTransition("a's fourth call", a.record(ok(0)).Transition, closed, open, 1, "failures 3/4 >= 50%")
	b.wantState("after a trips", closed, 0)

	h.advance(50 * time.Millisecond)
	b.wantTransition("b's fourth call", b.record(fail(0)).Transition, closed, open, 1, "failures 4/4 >= 50%")
	h.advance(100 * time.Millisecond)
	for _, c := range []string{"1", "2"} {
		a.wantDecision("a's probe "+c, a.admit("p"+c), probe, halfOpen, 1)
		b.wantDecision("b's probe "+c, b.admit("p"+c), probe, halfOpen, 1)
	}
	a.wantDecision("a's third probe", a.admit("p3"), reject, halfOpen, 1)
	a.wantTransition("a's failed probe", a.settle("p1", fail(1)).Transition, halfOpen, open, 2, "probe failed")
	if s := b.wantState("after a reopens", halfOpen, 1); s.ProbesInFlight != 2 {
		t.Errorf("snapshot of b %+v; want its 2 probes in flight", s)
	}
	b.wantResult("b's probe with the same claim as a's", b.settle("p1", ok(1)), halfOpen, 1, 0)
}

func testRatioRoundsToNearestThousandth(t *testing.T, f Factory) {
	p := basePolicy()
	p.MinCalls, p.FailureRatio = 3, 0.3334 // 333 thousandths: 1 of 3 is 333.3
	h := newHarness(t, f, p)
	res := h.record(ok(0), ok(0), fail(0))
	h.wantTransition("1 of 3 at ratio 0.3334", res.Transition, closed, open, 1, "failures 1/3 >= 33.3%")

	up := h.on(h.scope + "/up")
	up.p.FailureRatio = 0.3336 // 334 thousandths
	res = up.record(ok(0), ok(0), fail(0))
	up.wantResult("1 of 3 at ratio 0.3336", res, closed, 0, 0)
	up.wantNoTransition("1 of 3 at ratio 0.3336", res.Transition)
}

func testBatchedRecordAppliesOutcomesInOrder(t *testing.T, f Factory) {
	p := basePolicy()
	p.FailureRatio, p.MinCalls, p.ConsecutiveFailures = 0, 0, 2
	h := newHarness(t, f, p)
	res := h.record(fail(0), ok(0), fail(0))
	h.wantResult("failure, success, failure", res, closed, 0, 0)
	if s := h.snapshot(); s.ConsecutiveFailures != 1 || s.Failures != 2 {
		t.Errorf("snapshot %+v; want 2 failures, the last 1 in a row", s)
	}
	res = h.record(ok(0), fail(0), fail(0), ok(0), fail(0))
	h.wantResult("success, failure, failure, ...", res, open, 1, 2)
	h.wantTransition("success, failure, failure, ...", res.Transition, closed, open, 1, "consecutive failures 2 >= 2")
}

func testRestOfBatchIsStaleAfterTrip(t *testing.T, f Factory) {
	h := newHarness(t, f, basePolicy())
	res := h.record(fail(0), fail(0), fail(0), fail(0), ok(0), fail(0))
	h.wantResult("a batch that trips at its fourth outcome", res, open, 1, 2)
	h.wantTransition("a batch that trips at its fourth outcome", res.Transition, closed, open, 1, "failures 4/4 >= 50%")
	if s := h.snapshot(); s.Calls != 0 || s.ConsecutiveFailures != 0 {
		t.Errorf("snapshot %+v; the rest of the batch belongs to the old generation", s)
	}
}

func testTransitionToOpenReleasesProbeLeases(t *testing.T, f Factory) {
	h := newHarness(t, f, basePolicy())
	gen := h.halfOpen("a", "b")
	h.settle("a", fail(gen))
	h.waitOpenPeriod() // b's lease would still be live
	h.wantDecision("first probe after reopening", h.admit("c"), probe, halfOpen, gen+1)
	h.wantDecision("second probe after reopening", h.admit("d"), probe, halfOpen, gen+1)
	h.wantResult("b, released by the reopening", h.settle("b", ok(gen+1)), halfOpen, gen+1, 1)
}

func testTransitionToClosedReleasesProbeLeases(t *testing.T, f Factory) {
	p := basePolicy()
	p.ProbeSuccesses = 1
	h := newHarness(t, f, p)
	gen := h.halfOpen("a", "b")
	h.wantTransition("a's success", h.settle("a", ok(gen)).Transition, halfOpen, closed, gen+1, "probes succeeded 1/1")
	h.wantResult("b after closing", h.settle("b", ok(gen)), closed, gen+1, 1)
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
	h.halfOpen()
	gen := h.recover()
	res := h.record(ok(0), fail(gen), ok(gen-1), fail(gen+1), ok(gen))
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
	first := coordinator.WithBatchID(t.Context(), "batch-1")
	h.wantResult("batch-1", h.recordCtx(first, fail(0), ok(0)), closed, 0, 0)
	res := h.recordCtx(first, fail(0), ok(0))
	h.wantResult("batch-1 again", res, closed, 0, 2)
	if s := h.snapshot(); s.Calls != 2 || s.Failures != 1 {
		t.Errorf("snapshot %+v; want batch-1 counted once", s)
	}
	h.wantResult("batch-2", h.recordCtx(coordinator.WithBatchID(t.Context(), "batch-2"), ok(0)), closed, 0, 0)
	h.record(ok(0))
	h.record(ok(0))
	if s := h.snapshot(); s.Calls != 5 {
		t.Errorf("snapshot %+v; want 5 calls: batch-2 and two batches without an ID count", s)
	}
	other := h.on(h.scope + "/other")
	other.wantResult("batch-1 on another scope", other.recordCtx(first, ok(0)), closed, 0, 0)
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
	_, err := h.c.Admit(ctx, h.scope, bad, "a")
	check("Admit", err)
	_, err = h.c.Record(ctx, h.scope, bad, []coordinator.Outcome{fail(0), fail(0), fail(0), fail(0)})
	check("Record", err)
	_, err = h.c.Settle(ctx, h.scope, bad, "a", fail(0))
	check("Settle", err)
	_, err = h.c.Snapshot(ctx, h.scope, bad)
	check("Snapshot", err)
	if s := h.snapshot(); s.Calls != 0 || s.State != closed {
		t.Errorf("snapshot %+v; an invalid policy must change nothing", s)
	}
}

func testTransitionFields(t *testing.T, f Factory) {
	h := newHarness(t, f, basePolicy())
	// Sub-millisecond clock readings: At is the clock in whole milliseconds.
	h.advance(1234567 * time.Nanosecond)
	res := h.record(fail(0), ok(0), ok(0), fail(0))
	h.wantTransition("trip", res.Transition, closed, open, 1, "failures 2/4 >= 50%")
	h.waitOpenPeriod()
	h.advance(700 * time.Microsecond)
	d := h.admit("a")
	h.wantTransition("open period ended", d.Transition, open, halfOpen, 1, "open period ended")
	h.advance(10*time.Millisecond + 999*time.Microsecond)
	res = h.settle("a", fail(1))
	h.wantTransition("probe failed", res.Transition, halfOpen, open, 2, "probe failed")
	h.waitOpenPeriod()
	h.admit("b")
	h.admit("c")
	h.settle("b", ok(2))
	h.advance(time.Microsecond)
	res = h.settle("c", ok(2))
	h.wantTransition("probes succeeded", res.Transition, halfOpen, closed, 3, "probes succeeded 2/2")
}
