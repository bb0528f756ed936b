package coordinatortest

import (
	"errors"
	"testing"
	"time"

	"github.com/cbgrpc/cbgrpc/coordinator"
)

// The optional server pushback (coordinator.Pusher): a server's "stay
// away for d" opens the breaker fleet-wide for d, capped, as one
// transition fenced by the generation of the call that got the answer.
// When that call's own outcome got there first and opened the breaker by
// the rules, the push sets the open period instead: the server's word
// wins, whichever lands first, and still with one transition.

func (h *harness) pusher() coordinator.Pusher {
	h.t.Helper()
	p, ok := h.c.(coordinator.Pusher)
	if !ok {
		h.t.Skip("the coordinator is no coordinator.Pusher")
	}
	return p
}

func (h *harness) push(gen uint64, period time.Duration, reason string) coordinator.Result {
	h.t.Helper()
	res, err := h.pusher().Push(h.t.Context(), coordinator.PushRequest{Scope: h.scope, Policy: h.p, Generation: gen, Period: period, Reason: reason})
	if err != nil {
		h.t.Fatalf("Push(%.40q, gen %d, %v): %v", h.scope, gen, period, err)
	}
	return res
}

// testPushOpensOnceForThePeriod: the first push of a generation opens the
// breaker for its period, with its reason and the window at the time as
// the last trip; the rest of the burst, of the same generation, is stale.
func testPushOpensOnceForThePeriod(t *testing.T, f Factory) {
	p := basePolicy()
	p.MaxOpenFor = 10 * time.Second
	h := newHarness(t, f, p)
	h.pusher()
	gen := h.closedGen()
	h.record(ok(gen), fail(gen))
	res := h.push(gen, 2*time.Second, "server pushback 2s")
	h.wantResult("the first pushback", res, open, h.next(gen), 0)
	h.wantTransition("the first pushback", res.Transition, closed, open, h.next(gen), "server pushback 2s")
	if res.RetryAfter != 2*time.Second || !res.Transition.OpenUntil.Equal(h.now().Add(2*time.Second)) {
		t.Errorf("open for %v until %v; want 2s", res.RetryAfter, res.Transition.OpenUntil)
	}
	opened := res.Generation
	for range 5 {
		h.wantResult("the rest of the burst", h.push(gen, time.Second, "server pushback 1s"), open, opened, 1)
	}
	if s := h.snapshot(); s.LastTrip.Reason != "server pushback 2s" || s.LastTrip.Calls != 2 || s.LastTrip.Failures != 1 || s.LastTrip.Generation != opened {
		t.Errorf("last trip %+v; want the pushback with the window of 2 calls, 1 failure", s.LastTrip)
	}
	h.wantRejected("admitted during the pushed period", h.admit("a"), open, opened, 2*time.Second)
}

// testPushPeriodIsCapped: above MaxOpenFor (OpenFor without back-off), or
// 0 and below, the period is the cap.
func testPushPeriodIsCapped(t *testing.T, f Factory) {
	for _, c := range []struct {
		max, asked, want time.Duration
	}{
		{10 * time.Second, time.Hour, 10 * time.Second},
		{10 * time.Second, -1, 10 * time.Second},
		{10 * time.Second, 0, 10 * time.Second},
		{0, time.Hour, 100 * time.Millisecond}, // basePolicy's OpenFor
		{10 * time.Second, 1500 * time.Microsecond, time.Millisecond},
	} {
		p := basePolicy()
		p.MaxOpenFor = c.max
		h := newHarness(t, f, p).on(t.Name() + "/" + c.asked.String() + "/" + c.max.String())
		h.pusher()
		res := h.push(h.closedGen(), c.asked, "server pushback")
		if res.State != open || res.RetryAfter != c.want {
			t.Errorf("pushback of %v with MaxOpenFor %v: %+v; want open for %v", c.asked, c.max, res, c.want)
		}
	}
}

// testPushFencedByGeneration: a push of another generation, or to a
// breaker that is open, isolated or disabled, is stale; a probe's push in
// half-open reopens it.
func testPushFencedByGeneration(t *testing.T, f Factory) {
	h := newHarness(t, f, basePolicy())
	h.pusher()
	gen := h.closedGen()
	h.wantResult("an older generation", h.push(gen-1, time.Second, "server pushback"), closed, gen, 1)
	tripped := h.trip()
	h.wantResult("while open", h.push(tripped, time.Second, "server pushback"), open, tripped, 1)
	h.waitOpenPeriod()
	if d := h.admit("probe"); d.Verdict != probe {
		t.Fatalf("Admit after the open period = %+v; want a probe", d)
	}
	res := h.push(tripped, 50*time.Millisecond, "server pushback 50ms")
	if tr := res.Transition; tr == nil || tr.From != halfOpen || tr.To != open || tr.Generation != h.next(tripped) ||
		tr.Reason != "server pushback 50ms" || !tr.OpenUntil.Equal(h.now().Add(50*time.Millisecond)) {
		t.Errorf("a probe pushed back: %+v; want half-open -> open in generation %d for 50ms", res, h.next(tripped))
	}
	if _, ok := h.c.(coordinator.Controller); !ok {
		return
	}
	h.waitOpenPeriod()
	h.control("disable", outage)
	dis := h.snapshot().Generation
	h.wantResult("while disabled", h.push(dis, time.Second, "server pushback"), disabled, dis, 1)
}

// testPushAfterItsTripSetsThePeriod: the failure that tips the window
// lands before its pushback; the push of the closed generation then sets
// the open period to the server's, longer or shorter than OpenFor and
// capped at MaxOpenFor, with no transition of its own. The rest of the
// burst is stale.
func testPushAfterItsTripSetsThePeriod(t *testing.T, f Factory) {
	for _, c := range []struct{ asked, want time.Duration }{
		{30 * time.Second, 30 * time.Second},
		{20 * time.Millisecond, 20 * time.Millisecond},
		{time.Hour, time.Minute},
		{-1, time.Minute},
	} {
		p := basePolicy()
		p.MaxOpenFor = time.Minute
		h := newHarness(t, f, p).on(t.Name() + "/" + c.asked.String())
		h.pusher()
		gen := h.closedGen()
		tr := h.tripTransition()
		h.advance(time.Millisecond) // the push lands later than the Record
		res := h.push(gen, c.asked, "server pushback")
		h.wantResult("the pushback of the call that tipped the window", res, open, tr.Generation, 0)
		h.wantNoTransition("the pushback of the call that tipped the window", res.Transition)
		if res.RetryAfter != c.want {
			t.Errorf("pushback of %v after its trip: open for %v more; want %v", c.asked, res.RetryAfter, c.want)
		}
		h.wantResult("the rest of the burst", h.push(gen, time.Hour, "server pushback 1h"), open, tr.Generation, 1)
		if s := h.snapshot(); !s.OpenUntil.Equal(h.now().Add(c.want)) {
			t.Errorf("open until %v; want %v, the server's time", s.OpenUntil, h.now().Add(c.want))
		}
		h.wantRejected("admitted during the pushed period", h.admit("a"), open, tr.Generation, c.want)
		h.advance(c.want)
		if d := h.admit("probe"); d.Verdict != probe || d.Generation != tr.Generation {
			t.Errorf("Admit once the pushed period ended: %+v; want a probe in generation %d", d, tr.Generation)
		}
	}
}

// testPushAfterItsProbeFailedSetsThePeriod: a probe failing with a
// pushback, its settlement landing first, reopens for the pushback, not
// for the back-off period.
func testPushAfterItsProbeFailedSetsThePeriod(t *testing.T, f Factory) {
	p := basePolicy()
	p.MaxOpenFor = time.Minute
	h := newHarness(t, f, p)
	h.pusher()
	gen := h.halfOpen("probe")
	settled := h.settle("probe", fail(gen))
	if tr := settled.Transition; tr == nil || tr.From != halfOpen || tr.To != open {
		t.Fatalf("the failed probe: %+v; want half-open -> open", settled)
	}
	res := h.push(gen, 30*time.Second, "server pushback 30s")
	h.wantResult("the failed probe's pushback", res, open, settled.Generation, 0)
	h.wantNoTransition("the failed probe's pushback", res.Transition)
	if res.RetryAfter != 30*time.Second {
		t.Errorf("the failed probe's pushback: open for %v; want 30s, not the back-off's %v", res.RetryAfter, settled.RetryAfter)
	}
	h.wantRejected("admitted during the pushed period", h.admit("a"), open, settled.Generation, 30*time.Second)
}

// testPushAfterAnOpenIsFenced: a push of the generation a breaker opened
// from is stale once the breaker moved on (half-open); so is a push of an
// older generation, and one of the generation a push opened from: that
// push set the period.
func testPushAfterAnOpenIsFenced(t *testing.T, f Factory) {
	p := basePolicy()
	p.MaxOpenFor = time.Minute
	h := newHarness(t, f, p)
	h.pusher()
	gen := h.closedGen()
	opened := h.trip()
	h.wantResult("a generation older than the one it opened from", h.push(gen-1, time.Second, "server pushback"), open, opened, 1)
	h.waitOpenPeriod()
	if d := h.admit("probe"); d.Verdict != probe {
		t.Fatalf("Admit after the open period = %+v; want a probe", d)
	}
	h.wantResult("once half-open", h.push(gen, time.Second, "server pushback"), halfOpen, opened, 1)

	pushed := h.push(opened, time.Second, "server pushback 1s") // half-open -> open by the push
	if pushed.Transition == nil {
		t.Fatalf("a probe's pushback: %+v; want a transition", pushed)
	}
	h.wantResult("a second pushback of the probe's generation, after the push opened it", h.push(opened, time.Hour, "server pushback 1h"), open, pushed.Generation, 1)
	if s := h.snapshot(); !s.OpenUntil.Equal(h.now().Add(time.Second)) {
		t.Errorf("open until %v; want %v: the push that opened it keeps its period", s.OpenUntil, h.now().Add(time.Second))
	}
}

// testPushNeedsAReason: the transition is for operators to read.
func testPushNeedsAReason(t *testing.T, f Factory) {
	h := newHarness(t, f, basePolicy())
	gen := h.closedGen()
	if _, err := h.pusher().Push(t.Context(), coordinator.PushRequest{Scope: h.scope, Policy: h.p, Generation: gen, Period: time.Second, Reason: ""}); !errors.Is(err, coordinator.ErrInvalidNote) {
		t.Errorf("Push with no reason: %v; want an error wrapping ErrInvalidNote", err)
	}
	h.wantState("after a refused push", closed, gen)
}
