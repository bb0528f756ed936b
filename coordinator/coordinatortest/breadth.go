package coordinatortest

import (
	"testing"
	"time"

	"github.com/cbgrpc/cbgrpc/coordinator"
)

// Breadth (Policy.Outliers): Record attributes failures and slow calls to
// its replica, and a rule trips the breaker for the fleet only if it still
// holds without the Outliers replicas that contribute most to it, outliers
// among them, unless those are all the replicas heard within the window.
// The counts of a rule judged so are the counts without them.

// breadthPolicy trips on a run of three failures or on half of four calls,
// judged without the one replica that contributes most.
func breadthPolicy() coordinator.Policy {
	p := basePolicy()
	p.ConsecutiveFailures = 3
	p.Outliers = 1
	return p
}

func fails(gen uint64, n int) []coordinator.Outcome {
	out := make([]coordinator.Outcome, n)
	for i := range out {
		out[i] = fail(gen)
	}
	return out
}

func oks(gen uint64, n int) []coordinator.Outcome {
	out := make([]coordinator.Outcome, n)
	for i := range out {
		out[i] = ok(gen)
	}
	return out
}

// testBreadthLoneReplicaIsItsOwnFleet: the replica left out is the only
// one heard, so the rules hold as they are.
func testBreadthLoneReplicaIsItsOwnFleet(t *testing.T, f Factory) {
	h := newHarness(t, f, breadthPolicy()).as("lone")
	gen := h.closedGen()
	h.wantNoTrip("two failures", gen, fails(gen, 2)...)
	h.wantTrip("the third", gen, "consecutive failures 3 >= 3", fail(gen))
}

// testBreadthOneReplicaFailingAloneNeverTripsTheFleet: a replica that
// fails while another succeeds leaves the fleet closed however long its
// run, by either rule.
func testBreadthOneReplicaFailingAloneNeverTripsTheFleet(t *testing.T, f Factory) {
	p := breadthPolicy()
	p.ConsecutiveFailures = 0
	h := newHarness(t, f, p)
	good, bad := h.as("good"), h.as("bad")
	gen := h.closedGen()
	good.wantNoTrip("a success", gen, ok(gen))
	// Three failures and the one success are half of four calls, which
	// the fleet judged without "bad" does not reach; the fourth failure
	// makes bad an outlier (outliers.go), and the rest is stale.
	res := bad.record(fails(gen, 20)...)
	h.wantResult("twenty failures of one replica", res, closed, gen, 16)
	if res.Transition == nil || res.Transition.Replica != "bad" {
		t.Errorf("twenty failures of one replica: transition %+v; want bad's own", res.Transition)
	}
	good.wantNoTrip("a success after them", gen, ok(gen))
}

// testBreadthTripLeavesOutTheMostFailing: five replicas fail once each;
// the ratio holds without the one that contributes most (the lowest ID
// among equals) once the others make MinCalls.
func testBreadthTripLeavesOutTheMostFailing(t *testing.T, f Factory) {
	p := breadthPolicy()
	p.ConsecutiveFailures = 0
	h := newHarness(t, f, p)
	gen := h.closedGen()
	for _, r := range []string{"a", "b", "c", "d"} {
		h.as(r).wantNoTrip("a failure of "+r, gen, fail(gen))
	}
	h.as("e").wantTrip("a failure of e, the fifth replica", gen, "failures 4/4 >= 50%, leaving out 1 replica", fail(gen))
	if s := h.snapshot(); s.LastTrip.Calls != 5 || s.LastTrip.Failures != 5 {
		t.Errorf("last trip %+v; want the window's counts, every replica's: 5/5", s.LastTrip)
	}
}

// testBreadthRunLeavesOutTheMostFailing: the fleet's run of failures,
// judged without the replica that contributes most to it.
func testBreadthRunLeavesOutTheMostFailing(t *testing.T, f Factory) {
	h := newHarness(t, f, breadthPolicy())
	a, b, c := h.as("a"), h.as("b"), h.as("c")
	gen := h.closedGen()
	a.wantNoTrip("a", gen, fail(gen))
	b.wantNoTrip("b", gen, fail(gen))
	c.wantNoTrip("c: a run of 3, 2 without a", gen, fail(gen))
	a.wantNoTrip("a again: a run of 4, 2 without a", gen, fail(gen))
	b.wantTrip("b again: a run of 5, 3 without a", gen, "consecutive failures 3 >= 3, leaving out 1 replica", fail(gen))
}

// testBreadthAnySuccessEndsTheRun: the run is the fleet's, in the order
// Records come: a success from any replica ends it, late or not (a
// replica sends the successes it held with its next failure).
func testBreadthAnySuccessEndsTheRun(t *testing.T, f Factory) {
	p := breadthPolicy()
	p.Outliers, p.FailureRatio, p.MinCalls = 0, 0, 0
	h := newHarness(t, f, p)
	a, b := h.as("a"), h.as("b")
	gen := h.closedGen()
	a.wantNoTrip("two failures", gen, fails(gen, 2)...)
	b.wantNoTrip("successes held, then a failure", gen, ok(gen), ok(gen), fail(gen))
	a.wantNoTrip("a failure: a run of 2", gen, fail(gen))
	if s := h.snapshot(); s.ConsecutiveFailures != 2 {
		t.Errorf("snapshot %+v; want a run of 2", s)
	}
	b.wantTrip("another: 3", gen, "consecutive failures 3 >= 3", fail(gen))
}

// testBreadthOthersHeardWithinTheWindow: a replica heard more than a
// window ago is no longer part of the fleet: the one that fails now is
// alone, and trips the breaker.
func testBreadthOthersHeardWithinTheWindow(t *testing.T, f Factory) {
	h := newHarness(t, f, breadthPolicy())
	good, bad := h.as("good"), h.as("bad")
	gen := h.closedGen()
	good.wantNoTrip("good", gen, ok(gen))
	h.advance(900 * time.Millisecond)
	bad.wantNoTrip("a success of bad, which keeps the scope", gen, ok(gen))
	h.advance(100 * time.Millisecond)
	// good's bucket has left the window.
	bad.wantTrip("three failures of bad, heard alone", gen, "consecutive failures 3 >= 3", fails(gen, 3)...)
}

// testBreadthZeroKeepsThePlainRules: Outliers 0 judges every outcome
// alike, and finds no outlier.
func testBreadthZeroKeepsThePlainRules(t *testing.T, f Factory) {
	p := breadthPolicy()
	p.Outliers = 0
	h := newHarness(t, f, p)
	good, bad := h.as("good"), h.as("bad")
	gen := h.closedGen()
	good.wantNoTrip("good", gen, oks(gen, 4)...)
	bad.wantTrip("three failures of bad", gen, "consecutive failures 3 >= 3", fails(gen, 3)...)
	if s := h.snapshot(); len(s.Outliers) != 0 {
		t.Errorf("snapshot outliers %+v; want none", s.Outliers)
	}
}
