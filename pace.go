package cbgrpc

import (
	"time"

	"github.com/cbgrpc/cbgrpc/coordinator"
)

// Successes that change nothing need not reach the coordinator every
// record interval. After a Record, its answer says how far the scope's
// window is from tripping (Result.Calls, Failures, Slow). While it is
// calm, each ratio under half its threshold, successes alone wait up to
// the calm interval instead of the record interval; failures, probes and
// full batches go at once as always, taking the successes waiting with
// them, so a trip is detected as early as with any interval.
//
// What it trades: the shared window misses what calm replicas hold, at
// most a calm interval's worth of their successes. With the calm interval
// at most a sixth of the window, the window holds at least five sixths of
// their calls, so a failure ratio reads at most 1.2 times the truth, and
// only when few replicas see the failures (replicas that see a failure
// send their successes with it). A scope whose ratio climbs past half its
// threshold is no longer calm: its replicas report every record interval
// again from their next Record. The consecutive-failures rule counts runs
// across the fleet in the order Records arrive, which late successes of
// calm replicas lengthen: a run from replicas that each fail in a row
// while others succeed. It must hold without the Policy.Outliers replicas
// that contribute most to it, so a replica failing alone never makes one;
// without that (Outliers 0), a policy with the rule never paces.
const (
	calmFactor = 5 // the calm interval is at most this many record intervals
	calmShare  = 6 // and at most this share of the window
)

// calmInterval is how long the successes of a calm scope may wait: five
// record intervals, a sixth of the window at most, and never less than the
// record interval.
func calmInterval(recordInterval time.Duration, p coordinator.Policy) time.Duration {
	return max(recordInterval, min(calmFactor*recordInterval, p.Window/calmShare))
}

// calm reports whether a Record's answer leaves the scope calm: closed,
// not ramping, not throttling (whose share follows the counts the answers
// bring), and each trip ratio of its window under half its threshold.
func calm(p coordinator.Policy, a answer) bool {
	calls, failures, slow := a.window.calls, a.window.failures, a.window.slow
	if a.state != coordinator.StateClosed || a.transition != nil || a.rampLeft > 0 || calls == 0 || (p.ConsecutiveFailures > 0 && p.Outliers == 0) ||
		throttleShare(&p, &a.window) > 0 {
		return false
	}
	under := func(n int, ratio float64) bool { return ratio == 0 || 2*float64(n) < ratio*float64(calls) }
	return under(failures, p.FailureRatio) && (p.SlowCallDuration == 0 || under(slow, p.SlowCallRatio))
}
