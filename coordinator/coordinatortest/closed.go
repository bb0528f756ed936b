package coordinatortest

import (
	"testing"
	"time"

	"github.com/cbgrpc/cbgrpc/coordinator"
)

// Rule 1 of the contract (docs/architecture.md): a closed breaker admits every call with its
// generation, counts the outcomes of that generation, and trips to open in
// a new generation when a rule of the policy holds.

func testClosedAdmitsWithCurrentGeneration(t *testing.T, f Factory) {
	h := newHarness(t, f, basePolicy())
	d := h.admit("a")
	h.wantDecision("a scope never used", d, allow, closed, h.next(0))
	if d.RetryAfter != 0 || d.Transition != nil {
		t.Errorf("a scope never used: Admit = %+v; want no RetryAfter and no transition", d)
	}
	h.halfOpen()
	gen := h.recover()
	h.wantDecision("closed again", h.admit("b"), allow, closed, gen)
}

func testClosedCountsOutcomesOfCurrentGeneration(t *testing.T, f Factory) {
	h := newHarness(t, f, basePolicy())
	gen := h.closedGen()
	h.wantNoTrip("two outcomes of the current generation", gen, ok(gen), fail(gen))
	s := h.snapshot()
	if s.Calls != 2 || s.Failures != 1 || s.Slow != 0 || s.ConsecutiveFailures != 1 {
		t.Errorf("snapshot %+v; want 2 calls, 1 failure, 0 slow, 1 consecutive failure", s)
	}
}

func testClosedTripsOnFailureRatio(t *testing.T, f Factory) {
	h := newHarness(t, f, basePolicy())
	gen := h.closedGen()
	h.wantNoTrip("1 failure of 3", gen, fail(gen), ok(gen), ok(gen))
	h.advance(10 * time.Millisecond)
	gen = h.wantTrip("2 failures of 4", gen, "failures 2/4 >= 50%", fail(gen))
	s := h.wantState("after the trip", open, gen)
	if !s.OpenedAt.Equal(h.now()) || !s.OpenUntil.Equal(h.now().Add(h.p.OpenFor)) {
		t.Errorf("snapshot opened at %v until %v; want %v until %v", s.OpenedAt, s.OpenUntil, h.now(), h.now().Add(h.p.OpenFor))
	}
	if s.Calls != 0 || s.Failures != 0 {
		t.Errorf("snapshot %+v: the new generation's window must be empty", s)
	}
}

func testClosedRatioNeedsMinCalls(t *testing.T, f Factory) {
	h := newHarness(t, f, basePolicy())
	gen := h.closedGen()
	h.wantNoTrip("3 failures of 3, MinCalls 4", gen, fail(gen), fail(gen), fail(gen))
	h.wantTrip("3 failures of 4", gen, "failures 3/4 >= 50%", ok(gen))
}

// consecutivePolicy trips on three failures in a row and nothing else.
func consecutivePolicy() coordinator.Policy {
	p := basePolicy()
	p.FailureRatio, p.MinCalls, p.ConsecutiveFailures = 0, 0, 3
	return p
}

func testClosedTripsOnConsecutiveFailures(t *testing.T, f Factory) {
	h := newHarness(t, f, consecutivePolicy())
	gen := h.closedGen()
	h.wantNoTrip("2 failures in a row", gen, fail(gen), fail(gen))
	if s := h.snapshot(); s.ConsecutiveFailures != 2 {
		t.Errorf("snapshot %+v; want 2 consecutive failures", s)
	}
	h.wantTrip("3 failures in a row", gen, "consecutive failures 3 >= 3", fail(gen))
}

func testClosedSuccessResetsConsecutiveFailures(t *testing.T, f Factory) {
	h := newHarness(t, f, consecutivePolicy())
	gen := h.closedGen()
	h.wantNoTrip("never 3 failures in a row", gen, fail(gen), fail(gen), ok(gen), fail(gen), fail(gen), ok(gen), fail(gen), fail(gen))
	if s := h.snapshot(); s.ConsecutiveFailures != 2 || s.Calls != 8 {
		t.Errorf("snapshot %+v; want 8 calls ending in 2 consecutive failures", s)
	}
	h.wantTrip("third failure in a row", gen, "consecutive failures 3 >= 3", fail(gen))
}

func testClosedTripsOnSlowCallRatio(t *testing.T, f Factory) {
	p := basePolicy()
	p.FailureRatio = 0
	p.SlowCallDuration, p.SlowCallRatio = 100*time.Millisecond, 0.5
	h := newHarness(t, f, p)
	gen := h.closedGen()
	h.wantNoTrip("1 slow call of 3", gen, took(gen, 99*time.Millisecond), took(gen, 100*time.Millisecond), took(gen, time.Millisecond))
	if s := h.snapshot(); s.Calls != 3 || s.Slow != 1 || s.Failures != 0 {
		t.Errorf("snapshot %+v; want 3 calls, 1 slow (a call of exactly SlowCallDuration is slow)", s)
	}
	h.wantTrip("2 slow calls of 4", gen, "slow calls 2/4 >= 50%", took(gen, time.Second))
}
