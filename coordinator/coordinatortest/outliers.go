package coordinatortest

import (
	"testing"
	"time"

	"github.com/cbgrpc/cbgrpc/coordinator"
)

// Outliers: a replica whose own outcomes trip the rules while the fleet's,
// judged without the Outliers replicas that contribute most, do not, is an
// outlier if it fails (or is slow) markedly more than the rest of the
// fleet: implement.Markedly times their share or more, over the recent
// excursion when the rest made MinCalls calls in it, else over the
// window. A fleet failing alike has none (recent.go). Its own outcomes
// are those since it first failed or was slow (or since its last spell
// ended). Its Record is answered with Result.Outlier and a transition of
// its own (Transition.Replica), its outcomes leave the fleet's window,
// run and recent excursion, and the rest of its batch is stale. Its
// Records are stale until its period (OpenFor) ends; then the first
// outcome of the generation marked as its probe (Outcome.Probe) is: a
// success ends its spell, a failure starts a period twice as long, up to
// MaxOpenFor. Its other outcomes stay stale, late successes among them. A replica
// heard alone within the window is its own fleet, never an outlier. There
// are never more than Outliers at once: a new one ends the spell that
// began first. Outliers spend nothing of what a trip leaves out.

// wantOutlier checks what an answer says of its replica as an outlier.
func (h *harness) wantOutlier(what string, got *coordinator.Outlier, since, until time.Time, reason string) {
	h.t.Helper()
	want := coordinator.Outlier{Replica: h.replica, Since: since, Until: until, RetryAfter: max(0, until.Sub(h.now())), Reason: reason}
	if got == nil || !sameOutliers([]coordinator.Outlier{*got}, []coordinator.Outlier{want}) {
		h.t.Errorf("%s: outlier %+v; want %+v", what, got, want)
	}
}

// sameOutliers compares outliers, times by instant.
func sameOutliers(a, b []coordinator.Outlier) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		x, y := a[i], b[i]
		if !x.Since.Equal(y.Since) || !x.Until.Equal(y.Until) {
			return false
		}
		x.Since, x.Until = y.Since, y.Until
		if x != y {
			return false
		}
	}
	return true
}

// wantReplicaTransition checks a transition of the harness's replica alone.
func (h *harness) wantReplicaTransition(what string, tr *coordinator.Transition, from, to coordinator.State, gen uint64, reason string, until time.Time) {
	h.t.Helper()
	want := &coordinator.Transition{Scope: h.scope, From: from, To: to, Generation: gen, At: h.now(), Reason: reason,
		Replica: h.replica, OpenUntil: until}
	if tr == nil || !tr.At.Equal(want.At) || !tr.OpenUntil.Equal(want.OpenUntil) {
		h.t.Errorf("%s: transition %+v; want %+v", what, tr, want)
		return
	}
	got := *tr
	got.At, got.OpenUntil = want.At, want.OpenUntil
	if got != *want {
		h.t.Errorf("%s: transition %+v; want %+v", what, got, *want)
	}
}

// outlier makes bad an outlier of h's scope in its closed generation, by
// the run rule of breadthPolicy, next to good's four successes, and
// returns the generation and when it happened.
func outlier(h, good, bad *harness) (uint64, time.Time) {
	h.t.Helper()
	gen := h.closedGen()
	good.wantNoTrip("four successes", gen, oks(gen, 4)...)
	res := bad.record(fails(gen, 3)...)
	h.wantResult("three failures of bad", res, closed, gen, 0)
	at := h.now()
	bad.wantReplicaTransition("three failures of bad", res.Transition, closed, open, gen, "consecutive failures 3 >= 3", at.Add(h.p.OpenFor))
	bad.wantOutlier("three failures of bad", res.Outlier, at, at.Add(h.p.OpenFor), "consecutive failures 3 >= 3")
	return gen, at
}

func testOutlierIsToldAndLeavesTheWindow(t *testing.T, f Factory) {
	h := newHarness(t, f, breadthPolicy())
	good, bad := h.as("good"), h.as("bad")
	gen, at := outlier(h, good, bad)
	s := h.snapshot()
	if s.Calls != 4 || s.Failures != 0 || s.ConsecutiveFailures != 0 {
		t.Errorf("snapshot %+v; want good's 4 calls, bad's outcomes and run gone", s)
	}
	want := []coordinator.Outlier{{Replica: "bad", Since: at, Until: at.Add(h.p.OpenFor), RetryAfter: h.p.OpenFor, Reason: "consecutive failures 3 >= 3"}}
	if !sameOutliers(s.Outliers, want) {
		t.Errorf("snapshot outliers %+v; want %+v", s.Outliers, want)
	}
	res := good.record(ok(gen))
	good.wantResult("good's next success", res, closed, gen, 0)
	if res.Outlier != nil || res.Transition != nil {
		t.Errorf("good's next success: %+v; good is no outlier, and nothing moved", res)
	}
}

// testOutlierByRatioAfterAHealthySpell: a replica's own outcomes are those
// since it first failed, so MinCalls failures make it an outlier by the
// ratio whatever successes it had before.
func testOutlierByRatioAfterAHealthySpell(t *testing.T, f Factory) {
	p := breadthPolicy()
	p.ConsecutiveFailures = 0
	h := newHarness(t, f, p)
	good, bad := h.as("good"), h.as("bad")
	gen := h.closedGen()
	good.wantNoTrip("good", gen, oks(gen, 10)...)
	bad.wantNoTrip("bad's healthy spell", gen, oks(gen, 10)...)
	bad.wantNoTrip("three failures", gen, fails(gen, 3)...)
	res := bad.record(fail(gen), fail(gen))
	h.wantResult("the fourth failure and one more", res, closed, gen, 1)
	bad.wantReplicaTransition("the fourth failure", res.Transition, closed, open, gen, "failures 4/4 >= 50%", h.now().Add(p.OpenFor))
	bad.wantOutlier("the fourth failure", res.Outlier, h.now(), h.now().Add(p.OpenFor), "failures 4/4 >= 50%")
	if s := h.snapshot(); s.Calls != 20 || s.Failures != 0 {
		t.Errorf("snapshot %+v; want 20 calls: bad's successes before its first failure stay the fleet's", s)
	}
}

// testOutlierNeedsAnotherReplica: a replica heard alone whose own
// outcomes since its first failure trip the rules, though the window's do
// not, is its own fleet.
func testOutlierNeedsAnotherReplica(t *testing.T, f Factory) {
	p := breadthPolicy()
	p.ConsecutiveFailures = 0
	h := newHarness(t, f, p).as("lone")
	gen := h.closedGen()
	h.wantNoTrip("a healthy spell", gen, oks(gen, 10)...)
	res := h.record(fails(gen, 4)...)
	h.wantResult("four failures", res, closed, gen, 0)
	if res.Outlier != nil || res.Transition != nil {
		t.Errorf("four failures of the lone replica: %+v; want neither an outlier nor a transition", res)
	}
}

func testOutlierOutcomesAreStaleWhileIsolated(t *testing.T, f Factory) {
	h := newHarness(t, f, breadthPolicy())
	good, bad := h.as("good"), h.as("bad")
	gen, at := outlier(h, good, bad)
	h.advance(40 * time.Millisecond)
	res := bad.record(ok(gen), fail(gen))
	h.wantResult("bad's outcomes during its period", res, closed, gen, 2)
	h.wantNoTransition("bad's outcomes during its period", res.Transition)
	bad.wantOutlier("bad's outcomes during its period", res.Outlier, at, at.Add(h.p.OpenFor), "consecutive failures 3 >= 3")
	if s := h.snapshot(); s.Calls != 4 {
		t.Errorf("snapshot %+v; want good's 4 calls alone", s)
	}
}

func testOutlierProbeSuccessEndsTheSpell(t *testing.T, f Factory) {
	h := newHarness(t, f, breadthPolicy())
	good, bad := h.as("good"), h.as("bad")
	gen, at := outlier(h, good, bad)
	h.clock.Set(at.Add(h.p.OpenFor))
	res := bad.record(asProbe(ok(gen)), fail(gen))
	h.wantResult("bad's probe and one more call", res, closed, gen, 0)
	bad.wantReplicaTransition("bad's probe", res.Transition, halfOpen, closed, gen, "probe succeeded", time.Time{})
	if res.Outlier != nil {
		t.Errorf("after bad's probe succeeded: outlier %+v; want none", res.Outlier)
	}
	if s := h.snapshot(); len(s.Outliers) != 0 || s.Calls != 6 || s.Failures != 1 {
		t.Errorf("snapshot %+v; want no outlier, and bad's probe and call counted by the fleet", s)
	}
	// Tracked afresh: two more failures make a run of three of its own.
	res = bad.record(fails(gen, 2)...)
	bad.wantReplicaTransition("three failures again", res.Transition, closed, open, gen, "consecutive failures 3 >= 3", h.now().Add(h.p.OpenFor))
}

// testOutlierLateOutcomesAreNoProbe: once its period is over, an
// outlier's outcomes not marked as its probe (calls it let through before
// its spell that ended late) stay stale, in the Record that carries its
// probe too, before it; the probe alone decides.
func testOutlierLateOutcomesAreNoProbe(t *testing.T, f Factory) {
	h := newHarness(t, f, breadthPolicy())
	good, bad := h.as("good"), h.as("bad")
	gen, at := outlier(h, good, bad)
	h.clock.Set(at.Add(h.p.OpenFor))
	res := bad.record(ok(gen), ok(gen))
	h.wantResult("bad's late successes", res, closed, gen, 2)
	h.wantNoTransition("bad's late successes", res.Transition)
	bad.wantOutlier("bad's late successes", res.Outlier, at, at.Add(h.p.OpenFor), "consecutive failures 3 >= 3")
	res = bad.record(ok(gen), asProbe(fail(gen)))
	h.wantResult("a late success, then bad's failed probe", res, closed, gen, 1)
	bad.wantReplicaTransition("bad's failed probe", res.Transition, halfOpen, open, gen, "probe failed", h.now().Add(h.p.OpenFor))
	if s := h.snapshot(); s.Calls != 4 || len(s.Outliers) != 1 {
		t.Errorf("snapshot %+v; want good's 4 calls alone, and bad still an outlier", s)
	}
}

func testOutlierProbeFailureDoublesThePeriod(t *testing.T, f Factory) {
	p := breadthPolicy()
	p.MaxOpenFor = 350 * time.Millisecond
	h := newHarness(t, f, p)
	good, bad := h.as("good"), h.as("bad")
	gen, since := outlier(h, good, bad)
	for i, period := range []time.Duration{200 * time.Millisecond, 350 * time.Millisecond, 350 * time.Millisecond} {
		h.clock.Set(h.snapshot().Outliers[0].Until)
		res := bad.record(asProbe(fail(gen)), ok(gen))
		what := "probe " + string(rune('1'+i))
		h.wantResult(what, res, closed, gen, 1)
		bad.wantReplicaTransition(what, res.Transition, halfOpen, open, gen, "probe failed", h.now().Add(period))
		bad.wantOutlier(what, res.Outlier, since, h.now().Add(period), "probe failed")
	}
	// Without MaxOpenFor every period is OpenFor.
	p.MaxOpenFor = 0
	h2 := newHarness(t, f, p)
	h2.scope += "/no-backoff"
	good, bad = h2.as("good"), h2.as("bad")
	gen, _ = outlier(h2, good, bad)
	h2.clock.Set(h2.snapshot().Outliers[0].Until)
	res := bad.record(asProbe(fail(gen)))
	bad.wantReplicaTransition("a failed probe without MaxOpenFor", res.Transition, halfOpen, open, gen, "probe failed", h2.now().Add(p.OpenFor))
}

// testFleetTripEndsEverySpell: with the outlier out, good is the only
// replica heard, its own fleet, and its run trips the breaker; the new
// generation knows no outlier.
func testFleetTripEndsEverySpell(t *testing.T, f Factory) {
	h := newHarness(t, f, breadthPolicy())
	good, bad := h.as("good"), h.as("bad")
	gen, _ := outlier(h, good, bad)
	open := good.wantTrip("three failures of good", gen, "consecutive failures 3 >= 3", fails(gen, 3)...)
	if s := h.snapshot(); len(s.Outliers) != 0 {
		t.Errorf("after the fleet's trip: outliers %+v; want none", s.Outliers)
	}
	h.waitOpenPeriod()
	h.admit("p1")
	h.settle("p1", ok(open))
	h.admit("p2")
	closedAgain := h.next(open)
	h.wantResult("the second probe", h.settle("p2", ok(open)), closed, closedAgain, 0)
	res := bad.record(fail(gen))
	h.wantResult("bad's late outcome of the old generation", res, closed, closedAgain, 1)
	if res.Outlier != nil {
		t.Errorf("bad's late outcome: outlier %+v; want none in the new generation", res.Outlier)
	}
}

// testOutlierTransitionsStayOffTheFeed: a Watch carries the scope's
// transitions, never one replica's.
func testOutlierTransitionsStayOffTheFeed(t *testing.T, f Factory) {
	h := newHarness(t, f, breadthPolicy())
	ctx, watch := h.watch()
	good, bad := h.as("good"), h.as("bad")
	gen, _ := outlier(h, good, bad)
	res := good.record(fails(gen, 3)...)
	if res.Transition == nil {
		t.Fatalf("three failures of good: %+v; want the fleet's trip", res)
	}
	wantTransitions(t, ctx, watch, []coordinator.Transition{*res.Transition})
}

// testOutliersNeverMoreThanThePolicyAllows: with one outlier out, a trip
// still leaves out the replica that contributes most (a bad replica that
// restarted under a new ID, say), and once that one is an outlier too,
// the first one's spell ends: it is a replica like any other again, whose
// next outcome counts.
func testOutliersNeverMoreThanThePolicyAllows(t *testing.T, f Factory) {
	h := newHarness(t, f, breadthPolicy())
	good, bad, again, c := h.as("good"), h.as("bad"), h.as("again"), h.as("c")
	gen, at := outlier(h, good, bad)
	c.wantNoTrip("c's success", gen, ok(gen))
	again.wantNoTrip("two failures of again", gen, fails(gen, 2)...)
	c.wantNoTrip("a failure of c: a run of 3, 1 without again", gen, fail(gen))
	res := again.record(fail(gen))
	h.wantResult("again's third failure", res, closed, gen, 0)
	again.wantReplicaTransition("again's third failure", res.Transition, closed, open, gen, "consecutive failures 3 >= 3", h.now().Add(h.p.OpenFor))
	s := h.snapshot()
	if len(s.Outliers) != 1 || s.Outliers[0].Replica != "again" {
		t.Errorf("snapshot outliers %+v; want again alone, bad's spell ended", s.Outliers)
	}
	h.clock.Set(at.Add(h.p.OpenFor))
	res = bad.record(ok(gen))
	h.wantResult("bad's next success", res, closed, gen, 0)
	if res.Outlier != nil || res.Transition != nil {
		t.Errorf("bad's next success: %+v; want no outlier and no transition of its own", res)
	}
	if s := h.snapshot(); s.Calls != 7 || s.Failures != 1 {
		t.Errorf("snapshot %+v; want good's 4 calls, c's 2 and bad's success, again's and bad's failures gone", s)
	}
}

// testOutliersTwoFailingAlone: with Outliers 2, two replicas failing alike
// beside a healthy one are each compared with the fleet without the
// other, and both are outliers; the fleet stays closed.
func testOutliersTwoFailingAlone(t *testing.T, f Factory) {
	p := breadthPolicy()
	p.ConsecutiveFailures, p.Outliers = 0, 2
	h := newHarness(t, f, p)
	good, bad1, bad2 := h.as("good"), h.as("bad1"), h.as("bad2")
	gen := h.closedGen()
	good.wantNoTrip("two successes", gen, oks(gen, 2)...)
	for i := range 3 {
		bad1.wantNoTrip("a failure of bad1, "+string(rune('1'+i)), gen, fail(gen))
		bad2.wantNoTrip("a failure of bad2, "+string(rune('1'+i)), gen, fail(gen))
	}
	for _, b := range []*harness{bad1, bad2} {
		res := b.record(fail(gen))
		h.wantResult(b.replica+"'s fourth failure", res, closed, gen, 0)
		b.wantReplicaTransition(b.replica+"'s fourth failure", res.Transition, closed, open, gen, "failures 4/4 >= 50%", h.now().Add(p.OpenFor))
	}
	if s := h.snapshot(); len(s.Outliers) != 2 {
		t.Errorf("snapshot outliers %+v; want bad1 and bad2", s.Outliers)
	}
}
