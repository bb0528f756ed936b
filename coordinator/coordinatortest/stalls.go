package coordinatortest

import (
	"testing"

	"github.com/cbgrpc/cbgrpc/coordinator"
)

// Stalled calls (Outcome.Stalled): a call reported while it still runs,
// past how long the scope's calls take when healthy, counts as a failure
// in the window, the run of failures and the recent excursion. A trip by
// the run or the recent rule says how many of the failures it counted
// were stalled calls, at most the failures it names: ", 3 stalled".

func stalled(gen uint64) coordinator.Outcome {
	return coordinator.Outcome{Generation: gen, Stalled: true}
}

// testStalledCallsAreFailures: stalled calls fill the window's failures
// and the run, and a run of them trips the breaker saying so.
func testStalledCallsAreFailures(t *testing.T, f Factory) {
	h := newHarness(t, f, consecutivePolicy())
	gen := h.closedGen()
	h.wantNoTrip("2 stalled calls", gen, stalled(gen), stalled(gen))
	if s := h.snapshot(); s.ConsecutiveFailures != 2 || s.Failures != 2 || s.Calls != 2 {
		t.Errorf("snapshot %+v; want 2 calls, 2 failures, 2 in a row", s)
	}
	h.wantTrip("a third stalled call", gen, "consecutive failures 3 >= 3, 3 stalled", stalled(gen))
}

// testStalledRunEndsWithASuccess: a success ends the run, its stalled
// calls with it; a run of failures and stalls counts the stalls alone.
func testStalledRunEndsWithASuccess(t *testing.T, f Factory) {
	h := newHarness(t, f, consecutivePolicy())
	gen := h.closedGen()
	h.wantNoTrip("stalls, a success, a failure and a stall", gen, stalled(gen), stalled(gen), ok(gen), fail(gen), stalled(gen))
	h.wantTrip("a failure: 3 in a row, 1 stalled", gen, "consecutive failures 3 >= 3, 1 stalled", fail(gen))
}

// testStalledCallsTripTheRecentRule: after a healthy spell, stalled calls
// and failures together trip the recent rule, which says how many of its
// failures were stalled: all but the 2nd, 5th and 8th.
func testStalledCallsTripTheRecentRule(t *testing.T, f Factory) {
	h := newHarness(t, f, basePolicy())
	recentTripAfterASpell(h, func(gen uint64, i int) coordinator.Outcome {
		if i < 9 && i%3 == 1 {
			return fail(gen)
		}
		return stalled(gen)
	}, "recent failures 11/14, 4 over 50%, 8 stalled")
}
