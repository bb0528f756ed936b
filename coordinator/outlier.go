package coordinator

import "time"

// Outlier is a replica of the service that a coordinator found failing
// alone in one scope: its own outcomes trip the rules of the [Policy]
// while the fleet's, judged without the Policy.Outliers replicas that
// contribute most to them, do not, and it fails markedly more than the
// rest of the fleet over the same stretch of time (a fleet failing alike
// has none). A broken sidecar, a canary with a wrong deadline, a pod whose
// network is gone: such a replica sees nothing but failures, fast, and
// would otherwise open the breaker for every healthy replica of a healthy
// dependency. There are never more than Policy.Outliers at once: a new one
// ends the spell that began first.
//
// The coordinator takes an outlier's outcomes out of the fleet's window
// and tells the replica, in the answer to its Record (Result.Outlier),
// to reject its own calls of the scope until Until. After that the
// replica sends one call as its probe, and reports it with Record: a
// success ends its spell (a transition half-open -> closed with
// Transition.Replica set), a failure starts another period, twice as
// long up to Policy.MaxOpenFor. The fleet's breaker stays as it is
// throughout. A trip of the fleet, and every other transition of the
// scope that starts a generation, ends every spell.
type Outlier struct {
	Replica string
	Since   time.Time // when its spell began, by the coordinator's clock
	Until   time.Time // when its current period ends; then it may probe
	// RetryAfter is the time from the answer until Until: zero once the
	// period has ended and the replica may probe.
	RetryAfter time.Duration
	// Reason is the rule its own outcomes tripped, as a transition says
	// it: "consecutive failures 20 >= 20", "failures 12/20 >= 50%".
	Reason string
}

// MaxOutliers bounds Policy.Outliers.
const MaxOutliers = 8
