package coordinatortest

import (
	"testing"
	"time"

	"github.com/cbgrpc/cbgrpc/coordinator"
)

// Adaptive throttling (Policy.Throttle) is the callers' work, but its
// inputs are the fleet's: the window counts the requests the callers
// throttled (Outcome.Throttled) beside the calls, in the same buckets, so
// that every Record answer gives requests (calls + throttled) and accepts
// (calls − failures). A throttled request is never a call: it does not
// count towards MinCalls or a ratio, neither breaks nor extends a run of
// failures, and never trips the breaker. It is stale like any outcome of
// another generation, or after a trip in its batch.

func throttled(gen uint64) coordinator.Outcome {
	return coordinator.Outcome{Generation: gen, Throttled: true}
}

// wantWindow checks a Record answer's counts and, when it counted, that a
// Snapshot gives the same.
func (h *harness) wantWindow(what string, r coordinator.Result, calls, failures, throttledN int) {
	h.t.Helper()
	if r.Calls != calls || r.Failures != failures || r.Throttled != throttledN {
		h.t.Errorf("%s: counts %d/%d/%d (calls/failures/throttled); want %d/%d/%d (result %+v)",
			what, r.Calls, r.Failures, r.Throttled, calls, failures, throttledN, r)
	}
	if calls+throttledN == 0 {
		return
	}
	if s := h.snapshot(); s.Calls != r.Calls || s.Failures != r.Failures || s.Throttled != r.Throttled {
		h.t.Errorf("%s: the answer's counts %d/%d/%d differ from the snapshot's %d/%d/%d",
			what, r.Calls, r.Failures, r.Throttled, s.Calls, s.Failures, s.Throttled)
	}
}

// testThrottledCountsAsARequestNotACall: throttled requests are counted and
// answered beside the calls, and change nothing the trip rules read.
func testThrottledCountsAsARequestNotACall(t *testing.T, f Factory) {
	p := basePolicy()
	p.Throttle, p.FailureRatio = 2, 0.75
	h := newHarness(t, f, p)
	gen := h.closedGen()

	r := h.record(throttled(gen), throttled(gen), throttled(gen))
	h.wantResult("a Record of throttled requests only", r, closed, gen, 0)
	h.wantWindow("a Record of throttled requests only", r, 0, 0, 3)
	// Three failures and many throttled requests: fewer calls than
	// MinCalls (4), so no ratio holds however many requests there are.
	h.wantNoTrip("failures among throttled requests", gen,
		fail(gen), throttled(gen), fail(gen), throttled(gen), throttled(gen), fail(gen), throttled(gen))
	h.wantWindow("the same window", h.record(throttled(gen)), 3, 3, 8)
	// The fourth call trips on the ratio, counted in calls alone.
	h.wantTrip("the fourth call", gen, "failures 4/4 >= 75%", throttled(gen), fail(gen))
	if s := h.snapshot(); s.Throttled != 0 || s.Calls != 0 {
		t.Errorf("after the trip: %s; want an empty window in the open generation", showSnapshot(s))
	}

	hc := h.on(h.scope + "/consecutive")
	hc.p.FailureRatio, hc.p.MinCalls, hc.p.ConsecutiveFailures = 0, 0, 3
	cgen := hc.closedGen()
	// A throttled request between two failures neither breaks the run nor
	// extends it.
	hc.wantNoTrip("two failures around throttled requests", cgen, fail(cgen), throttled(cgen), throttled(cgen), fail(cgen))
	if s := hc.snapshot(); s.ConsecutiveFailures != 2 || s.Throttled != 2 {
		t.Errorf("run of failures around throttled requests: %s; want a run of 2 and 2 throttled", showSnapshot(s))
	}
	hc.wantTrip("the third failure", cgen, "consecutive failures 3 >= 3", fail(cgen))
}

// testThrottledLeavesTheWindowAndGoesStale: throttled requests leave the
// window with their bucket, keep a closed scope for a window like any
// outcome, are stale in another generation, in a retried batch, and after
// a trip in their batch.
func testThrottledLeavesTheWindowAndGoesStale(t *testing.T, f Factory) {
	p := basePolicy()
	p.MinCalls = 100
	h := newHarness(t, f, p)
	gen := h.closedGen()

	h.wantWindow("the first Record", h.record(ok(gen), throttled(gen), throttled(gen)), 1, 0, 2)
	h.advance(300 * time.Millisecond)
	h.wantWindow("three buckets later", h.record(throttled(gen), fail(gen)), 2, 1, 3)
	// The first bucket leaves the window, its throttled requests with it.
	h.advance(800 * time.Millisecond)
	h.wantWindow("once the first bucket has left", h.record(throttled(gen)), 1, 1, 2)

	h.wantWindow("a batch", h.recordBatch("throttled-batch", throttled(gen)), 1, 1, 3)
	r := h.recordBatch("throttled-batch", throttled(gen))
	h.wantResult("the same batch again", r, closed, gen, 1)
	h.wantWindow("the same batch again", r, 0, 0, 0)
	r = h.record(throttled(gen-1), throttled(gen-1))
	h.wantResult("throttled requests of other generations", r, closed, gen, 2)
	h.wantWindow("throttled requests of other generations", r, 0, 0, 0)

	// A Record of throttled requests alone keeps the scope for a window
	// from its bucket, as any outcome does.
	last := h.now()
	h.record(throttled(gen))
	h.wantForgottenAt("a scope whose last outcome was throttled", h.forgetAt(last), gen)

	ht := h.on(h.scope + "/trips")
	ht.p.MinCalls = 2
	tgen := ht.closedGen()
	r = ht.record(throttled(tgen), fail(tgen), fail(tgen), throttled(tgen), ok(tgen))
	ht.wantResult("a batch that trips in its middle", r, open, ht.next(tgen), 2)
	if s := ht.snapshot(); s.Throttled != 0 {
		t.Errorf("after the trip: %s; want no throttled requests in the open generation", showSnapshot(s))
	}
	if r := ht.record(throttled(ht.snapshot().Generation)); r.Stale != 1 || r.Throttled != 0 {
		t.Errorf("a throttled request while open: %+v; want stale", r)
	}
}
