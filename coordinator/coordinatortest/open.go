package coordinatortest

import (
	"fmt"
	"testing"
	"time"

	"github.com/cbgrpc/cbgrpc/coordinator"
)

// Rule 2 of the contract (docs/architecture.md): an open breaker rejects until its open period
// ends, and the first Admit after that moves it to half-open. The answers
// say when the open period ends (Result.RetryAfter, Transition.OpenUntil),
// for it is OpenFor only until the breaker reopens.

func testOpenRejectsUntilOpenPeriodEnds(t *testing.T, f Factory) {
	h := newHarness(t, f, basePolicy())
	gen := h.trip()
	h.advance(40 * time.Millisecond)
	h.wantRejected("40ms into a 100ms open period", h.admit("a"), open, gen, 60*time.Millisecond)
	h.advance(59 * time.Millisecond)
	h.wantRejected("1ms before the end", h.admit("a"), open, gen, time.Millisecond)
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

// doublingPolicy opens for 100ms, then 200ms, then 350ms on each reopening.
func doublingPolicy() coordinator.Policy {
	p := basePolicy()
	p.MaxOpenFor = 350 * time.Millisecond
	return p
}

func testOpenPeriodDoublesUpToMaxOpenFor(t *testing.T, f Factory) {
	h := newHarness(t, f, doublingPolicy())
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
		gen = h.failProbe(fmt.Sprintf("probe-%d", i), gen)
		wantPeriod(fmt.Sprintf("after failed probe %d", i+1), want)
	}
	h.waitOpenPeriod()
	h.recover()
	h.trip()
	wantPeriod("first trip after closing", 100*time.Millisecond)
}

// failProbe waits for the open period of generation gen to end, probes
// under claim, has the probe fail, and returns the generation the breaker
// reopened in.
func (h *harness) failProbe(claim string, gen uint64) uint64 {
	h.t.Helper()
	h.waitOpenPeriod()
	h.wantDecision("probe", h.admit(claim), probe, halfOpen, gen)
	res := h.settle(claim, fail(gen))
	h.wantResult("failed probe", res, open, h.next(gen), 0)
	return res.Generation
}

// testOpenPeriodKeepsOpenForUntilBackoffAfter: with BackoffAfter, every
// reopening keeps OpenFor until the breaker has been failing that long
// since its trip, then the period doubles up to MaxOpenFor; a recovery
// starts the count afresh.
func testOpenPeriodKeepsOpenForUntilBackoffAfter(t *testing.T, f Factory) {
	p := doublingPolicy()
	p.BackoffAfter = 250 * time.Millisecond
	h := newHarness(t, f, p)
	gen := h.trip()
	for i, want := range []time.Duration{100, 100, 200, 350, 350} {
		gen = h.failProbe(fmt.Sprintf("probe-%d", i), gen)
		if s := h.snapshot(); s.OpenUntil.Sub(s.OpenedAt) != want*time.Millisecond {
			t.Errorf("after failed probe %d, %v after the trip: open for %v; want %v", i+1, s.OpenedAt.Sub(Start), s.OpenUntil.Sub(s.OpenedAt), want*time.Millisecond)
		}
	}
	h.waitOpenPeriod()
	gen = h.recover()
	h.trip()
	h.waitOpenPeriod()
	h.admit("after")
	if res := h.settle("after", fail(h.snapshot().Generation)); res.RetryAfter != p.OpenFor {
		t.Errorf("a failed probe right after a new trip: open for %v; want OpenFor again", res.RetryAfter)
	}
}

// testResultRetryAfterIsTimeLeftOpen: Record and Settle tell how long the
// open period has left, which after a reopening is not OpenFor, and
// nothing once it has ended (the breaker reads half-open).
func testResultRetryAfterIsTimeLeftOpen(t *testing.T, f Factory) {
	h := newHarness(t, f, doublingPolicy())
	wantRetryAfter := func(what string, res coordinator.Result, state coordinator.State, want time.Duration) {
		t.Helper()
		if res.State != state || res.RetryAfter != want {
			t.Errorf("%s: result %v, RetryAfter %v; want %v, RetryAfter %v (result %+v)", what, res.State, res.RetryAfter, state, want, res)
		}
	}
	gen := h.closedGen()
	res := h.record(fail(gen), fail(gen), fail(gen), fail(gen))
	wantRetryAfter("the trip", res, open, 100*time.Millisecond)
	gen = res.Generation
	h.advance(40 * time.Millisecond)
	wantRetryAfter("Record 40ms into the open period", h.record(ok(gen)), open, 60*time.Millisecond)
	wantRetryAfter("Settle 40ms into the open period", h.settle("nobody", ok(gen)), open, 60*time.Millisecond)

	h.waitOpenPeriod()
	wantRetryAfter("Record at the end of the open period", h.record(ok(gen)), halfOpen, 0)
	h.admit("p")
	h.advance(10 * time.Millisecond)
	res = h.settle("p", fail(gen))
	wantRetryAfter("the failed probe that doubles the open period", res, open, 200*time.Millisecond)
	h.advance(50 * time.Millisecond)
	wantRetryAfter("Record 50ms into the doubled open period", h.record(ok(res.Generation)), open, 150*time.Millisecond)
}

// testTransitionOpenUntilIsEndOfOpenPeriod: a transition to open carries
// the end of its open period, any other none (those to isolated: see
// control.go).
func testTransitionOpenUntilIsEndOfOpenPeriod(t *testing.T, f Factory) {
	h := newHarness(t, f, doublingPolicy())
	wantOpenUntil := func(what string, tr *coordinator.Transition, want time.Time) {
		t.Helper()
		if tr == nil || !tr.OpenUntil.Equal(want) {
			t.Errorf("%s: transition %+v; want OpenUntil %v", what, tr, want)
		}
	}
	gen := h.closedGen()
	wantOpenUntil("the trip", h.record(fail(gen), fail(gen), fail(gen), fail(gen)).Transition, h.now().Add(100*time.Millisecond))
	h.waitOpenPeriod()
	d := h.admit("p")
	wantOpenUntil("open -> half-open", d.Transition, time.Time{})
	h.advance(10 * time.Millisecond)
	wantOpenUntil("the failed probe", h.settle("p", fail(d.Generation)).Transition, h.now().Add(200*time.Millisecond))
	h.waitOpenPeriod()
	gen = h.snapshot().Generation
	h.admit("q")
	h.admit("r")
	h.settle("q", ok(gen))
	wantOpenUntil("half-open -> closed", h.settle("r", ok(gen)).Transition, time.Time{})
}
