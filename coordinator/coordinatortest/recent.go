package coordinatortest

import (
	"testing"
	"time"

	"github.com/cbgrpc/cbgrpc/coordinator"
)

// The recent rule (docs/architecture.md): beside the window, the breaker
// keeps the fleet's recent excursion, the calls counted since failures
// began to outrun FailureRatio: a failure starts one, and it ends (the
// next call finds it spent) once its failures are no longer above the
// ratio's share of its calls, or a window after it began. Its calls are
// the ones counted, or, if more, those the fleet's pace says it made
// since it began: the calls of the bucket before the current one, per
// bucket width. When a failure counts and the excursion's failures exceed
// the ratio's share by MinCalls calls or more, the breaker trips, judged
// without the Outliers replicas that contribute most, whatever the window
// holds; but only once the fleet's pace is known: the bucket before the
// current one whole (the one before it has calls) and holding MinCalls
// calls. The same for slow calls, with SlowCallRatio.

// spell records perBucket successes of h's replica in each of nine
// buckets, one bucket width apart, and leaves the clock at the start of
// the tenth: a healthy spell that gives the fleet its pace.
func spell(h *harness, gen uint64, perBucket int) {
	h.t.Helper()
	for range 9 {
		h.wantNoTrip("a healthy spell", gen, oks(gen, perBucket)...)
		h.advance(h.p.BucketWidth())
	}
}

// testRecentFailuresTripBeforeTheWindow: after a healthy spell the window
// is far from half failures, but three failures in four trip the breaker
// once they are MinCalls above half of the recent calls.
func testRecentFailuresTripBeforeTheWindow(t *testing.T, f Factory) {
	h := newHarness(t, f, basePolicy())
	recentTripAfterASpell(h, func(gen uint64, _ int) coordinator.Outcome { return fail(gen) }, "recent failures 11/14, 4 over 50%")
}

// recentTripAfterASpell runs a healthy spell, then three failed calls in
// four, until the recent rule trips with reason: 11 failed calls, the
// i-th of them bad(gen, i), in 14.
func recentTripAfterASpell(h *harness, bad func(gen uint64, i int) coordinator.Outcome, reason string) {
	h.t.Helper()
	gen := h.closedGen()
	spell(h, gen, 5)
	n := 0
	next := func() coordinator.Outcome { n++; return bad(gen, n-1) }
	for i := range 3 {
		h.wantNoTrip("three failed calls and a success, "+string(rune('1'+i)), gen, next(), next(), next(), ok(gen))
	}
	h.wantNoTrip("a failed call: 10/13, 3.5 over half", gen, next())
	h.wantTrip("another: 11/14, 4 over half", gen, reason, next())
	if s := h.snapshot(); s.LastTrip.Calls != 59 || s.LastTrip.Failures != 11 {
		h.t.Errorf("last trip %+v; want the window's counts, 59 calls and 11 failures", s.LastTrip)
	}
}

// testRecentBelowTheRatioNeverTrips: two failures in five, however many,
// end every excursion they start.
func testRecentBelowTheRatioNeverTrips(t *testing.T, f Factory) {
	h := newHarness(t, f, basePolicy())
	gen := h.closedGen()
	var outs []coordinator.Outcome
	for range 100 {
		outs = append(outs, ok(gen), fail(gen), ok(gen), ok(gen), fail(gen))
	}
	h.wantNoTrip("200 failures in 500 calls", gen, outs...)
}

// recentPacePolicy has buckets of a second, so that a replica's failures
// can come at a pace over tens of milliseconds within one.
func recentPacePolicy() coordinator.Policy {
	p := basePolicy()
	p.Window = 10 * time.Second
	return p
}

// testRecentCountsTheCallsTheFleetMakes: after a spell of 100 calls a
// second, a replica that sends a failure every 20ms while the others hold
// their successes is half the fleet's calls at most, and never trips the
// breaker; a failure every 10ms is all of them, and does. Counted alone,
// the failures would trip it both times.
func testRecentCountsTheCallsTheFleetMakes(t *testing.T, f Factory) {
	p := recentPacePolicy()
	h := newHarness(t, f, p)
	gen := h.closedGen()
	spell(h, gen, 100)
	for range 10 {
		h.as("failing").wantNoTrip("a failure every 20ms", gen, fail(gen))
		h.advance(20 * time.Millisecond)
	}

	h = h.on(h.scope + "/all")
	gen = h.closedGen()
	spell(h, gen, 100)
	for range 7 {
		h.as("failing").wantNoTrip("a failure every 10ms", gen, fail(gen))
		h.advance(10 * time.Millisecond)
	}
	h.as("failing").wantTrip("the eighth: 8/8, 4 over half", gen, "recent failures 8/8, 4 over 50%", fail(gen))
}

// testRecentEndsAWindowAfterItBegan: an excursion is the fleet's recent
// outcomes, never older than a window: one that began a window ago
// starts afresh.
func testRecentEndsAWindowAfterItBegan(t *testing.T, f Factory) {
	h := newHarness(t, f, basePolicy())
	gen := h.closedGen()
	spell(h, gen, 5)
	h.wantNoTrip("seven failures: 3.5 over half", gen, fails(gen, 7)...)
	h.advance(h.p.Window / 2)
	// A throttled request keeps the scope from being forgotten, and is no
	// call of the excursion.
	h.wantNoTrip("a throttled request", gen, coordinator.Outcome{Generation: gen, Throttled: true})
	h.advance(h.p.Window / 2)
	h.wantNoTrip("another failure a window later, the first of an excursion", gen, fail(gen))
	if s := h.snapshot(); s.Calls != 1 {
		t.Errorf("snapshot %+v; want the window to hold the last failure alone", s)
	}
}

// testRecentSlowCallsTrip: the same for slow calls, with SlowCallRatio.
func testRecentSlowCallsTrip(t *testing.T, f Factory) {
	p := basePolicy()
	p.FailureRatio = 0
	p.SlowCallDuration, p.SlowCallRatio = 100*time.Millisecond, 0.5
	h := newHarness(t, f, p)
	gen := h.closedGen()
	slow, quick := took(gen, time.Second), took(gen, time.Millisecond)
	spell(h, gen, 5)
	for i := range 3 {
		h.wantNoTrip("three slow calls and a quick one, "+string(rune('1'+i)), gen, slow, slow, slow, quick)
	}
	h.wantNoTrip("a slow call: 10/13", gen, slow)
	h.wantTrip("another: 11/14", gen, "recent slow calls 11/14, 4 over 50%", slow)
}

// testRecentLeavesOutTheMostFailing: three replicas failing alike after
// another's healthy spell: none is an outlier, though each one's own
// outcomes trip the rules, since none fails markedly more than the rest;
// the recent rule trips the fleet once it holds without the replica that
// contributes most (the lowest ID among equals), while the window,
// without it, still holds too few failures.
func testRecentLeavesOutTheMostFailing(t *testing.T, f Factory) {
	p := basePolicy()
	p.Outliers = 1
	h := newHarness(t, f, p)
	gen := h.closedGen()
	spell(h.as("good"), gen, 4)
	a, b, c := h.as("a"), h.as("b"), h.as("c")
	for i := range 3 {
		for _, r := range []*harness{a, b, c} {
			r.wantNoTrip("a failure of "+r.replica+", round "+string(rune('1'+i)), gen, fail(gen))
		}
	}
	a.wantNoTrip("a's fourth failure: its own 4/4, the rest's 6/6", gen, fail(gen))
	b.wantNoTrip("b's fourth", gen, fail(gen))
	c.wantTrip("c's fourth: 12/12 recently, 8/8 without a", gen, "recent failures 8/8, 4 over 50%, leaving out 1 replica", fail(gen))
	if s := h.snapshot(); s.LastTrip.Calls != 48 || s.LastTrip.Failures != 12 {
		t.Errorf("last trip %+v; want the window's counts, 48 calls and 12 failures", s.LastTrip)
	}
}

// testRecentHeldSuccessesCountFromAReplicasFirstFailure: with Outliers, a
// replica's successes count in the excursion once it has failed in it; the
// successes it held from before, sent with its first failure, count in
// none (the fleet's pace stands for them). Five replicas each send ten
// such successes and two failures: the recent rule trips on the failures.
func testRecentHeldSuccessesCountFromAReplicasFirstFailure(t *testing.T, f Factory) {
	p := basePolicy()
	p.Outliers = 1
	h := newHarness(t, f, p)
	gen := h.closedGen()
	spell(h.as("good"), gen, 5)
	held := append(oks(gen, 10), fail(gen), fail(gen))
	for _, r := range []string{"a", "b", "c", "d"} {
		h.as(r).wantNoTrip(r+"'s held successes and two failures", gen, held...)
	}
	h.as("e").wantTrip("e's: 10/10 recently, 8/8 without a", gen, "recent failures 8/8, 4 over 50%, leaving out 1 replica", held...)
}

// testRecentWaitsForTheFleetsPace: in a window with no calls before its
// current bucket (a young fleet, a fresh generation), the fleet's pace is
// unknown, and a replica's failures sent at once while the others hold
// their successes could look like a brownout: the recent rule waits, and
// the window's own rules judge meanwhile (testRecentFailuresTripBeforeTheWindow
// trips on the same failures after a spell).
func testRecentWaitsForTheFleetsPace(t *testing.T, f Factory) {
	h := newHarness(t, f, basePolicy())
	gen := h.closedGen()
	h.as("good").wantNoTrip("a healthy first bucket", gen, oks(gen, 40)...)
	h.as("failing").wantNoTrip("nine failures: 4.5 over half, but no pace yet", gen, fails(gen, 9)...)
}
