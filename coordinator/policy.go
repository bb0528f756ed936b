package coordinator

import (
	"errors"
	"fmt"
	"math"
	"time"
)

// Policy says when a breaker trips and how it recovers. Times are kept to
// the millisecond: coordinators compare them in whole milliseconds.
type Policy struct {
	Window              time.Duration // length of the sliding window of outcomes
	Buckets             int           // the window is kept as this many time buckets of Window/Buckets each (rounded down to the millisecond)
	MinCalls            int           // no rate rule trips with fewer calls than this in the window; the recent rule trips this many calls above the ratio
	FailureRatio        float64       // trip when failures/calls >= this (0 disables), over the window or, sooner, recently
	ConsecutiveFailures int           // trip after this many failures in a row (0 disables)
	SlowCallDuration    time.Duration // a call at least this slow counts as slow (0 disables, with SlowCallRatio)
	SlowCallRatio       float64       // trip when slow/calls >= this (0 disables, with SlowCallDuration)
	OpenFor             time.Duration // how long the breaker stays open before probes may start
	MaxOpenFor          time.Duration // 0, or > OpenFor: after BackoffAfter, the open period doubles on each reopening, capped here
	Probes              int           // probe slots in half-open, fleet-wide
	ProbeLease          time.Duration // a claimed probe slot is released if not settled within this
	ProbeSuccesses      int           // probe successes needed to close; may exceed Probes, since a settled slot is reused
	// BackoffAfter is how long the breaker may keep failing its probes
	// before the open period starts to double: until then every reopening
	// keeps OpenFor, so that a fleet sharing one probe budget notices a
	// recovery within about OpenFor while it sends a dependency that stays
	// down at most Probes calls per OpenFor, however many replicas it has.
	// Counted from the trip that left closed. 0 doubles at once; without
	// MaxOpenFor nothing doubles.
	BackoffAfter time.Duration
	// RampFor, when set, is how long after the breaker recovers (closes
	// after being open, half-open or isolated) the fleet ramps its
	// traffic back up: coordinators report the time left of the ramp
	// (Decision.RampLeft, Result.RampLeft), counted from their own clock's
	// time of the close, and a Breaker admits a share of calls rising
	// linearly to all of them. A scope forgotten after a window without
	// calls forgets its ramp. 0, the default, is off.
	RampFor time.Duration
	// Throttle, when set, is K of client-side adaptive throttling (the
	// Google SRE book's), fleet-wide: while the breaker is closed, a
	// Breaker rejects each call locally with probability
	// max(0, (requests − K × accepts) / (requests + 1)), requests and
	// accepts being the fleet's counts in the shared window (calls plus
	// throttled requests, and calls that did not fail), so that a
	// dependency that serves only part of the load gets about K times
	// what it accepts. It rejects nothing while the window holds fewer
	// calls than MinCalls (or ConsecutiveFailures, if larger), so that
	// the trip rules always get the calls they need. Coordinators count
	// throttled requests (Outcome.Throttled) whatever K is. 0, the
	// default, is off; otherwise at least 1 (2 is the book's choice), and
	// a FailureRatio that is on must be above 1 − 1/K, the share of
	// failures the throttle holds the dependency at.
	Throttle float64
	// Outliers is how many replicas a fleet trip leaves out: a rule
	// opens the breaker for the fleet only if it still holds without the
	// Outliers replicas that contribute most to it, unless those are all
	// the replicas that recorded within the window, so that one replica
	// alone is its own fleet. A replica whose own outcomes trip the rules
	// while the fleet's do not, and that fails markedly more than the rest
	// of the fleet, is an [Outlier]: it alone rejects its calls for an
	// open period; never more than Outliers at once. 0 keeps the plain
	// rules, on every outcome alike; at most [MaxOutliers].
	Outliers int
}

// DefaultPolicy returns a policy for real traffic:
//
//   - Window 30s in 10 buckets of 3s: long enough to hold MinCalls for a
//     modest scope, short enough that an old incident stops counting within
//     half a minute. Recording costs O(Buckets) whatever the traffic.
//   - MinCalls 20 and FailureRatio 0.5: resilience4j's 50% threshold, with a
//     smaller minimum (its default is 100) because the window is shared by
//     the whole fleet, which reaches 20 calls quickly. The same two decide
//     the recent rule, which judges a brownout by the fleet's latest
//     outcomes rather than the window's: it trips once recent failures are
//     20 calls above half of the recent calls, so the fleet's traffic, not
//     the window, sets how soon, while a share below half ends every
//     excursion it starts (docs/architecture.md, "The recent rule").
//   - ConsecutiveFailures 20: a dependency that goes down after a healthy
//     spell trips within a run of failures, where the ratio would wait for
//     them to outweigh a window of successes. The run is the fleet's: a
//     success from any replica ends it, and it must hold without the
//     replica that contributes most (Outliers). Noise makes no run of 20.
//   - Outliers 1: one replica failing alone, markedly more than the rest,
//     opens the breaker for itself, never for the fleet.
//   - Slow-call rule off: what counts as slow depends on the method.
//   - Stalls (the client's side of the rules): a call still running past
//     how long the scope's calls take when healthy is reported while it
//     runs, as a stalled call (Outcome.Stalled), which every rule counts
//     as a failure, so that a dependency that stops answering trips within
//     a second instead of at its callers' deadlines. The threshold is
//     SlowCallDuration when set, else learned by each replica from its
//     calls' latency (three times the top of the p99's octave, at least
//     100ms); a trip by stalls says "N stalled" in its reason.
//     cbgrpc.WithStallAfter sets the threshold, or turns the watch off
//     with cbgrpc.StallsOff.
//   - OpenFor 1s and Probes 1: the fleet shares one probe budget, so it can
//     afford to look for a recovery every second, a call a second into a
//     dependency that stays down whatever the number of replicas
//     (gobreaker and resilience4j wait 60s, to keep N replicas from probing
//     N times over). After BackoffAfter 2m of failed probes the open period
//     doubles on each failed probe, up to MaxOpenFor 60s.
//   - ProbeSuccesses 3: a recovery takes three probes, one after another,
//     and three successes in a row are unlikely by luck alone.
//   - ProbeLease 10s: longer than a typical unary deadline, so a live probe
//     keeps its slot, short enough that a crashed prober's slot returns soon.
func DefaultPolicy() Policy {
	return Policy{
		Window:              30 * time.Second,
		Buckets:             10,
		MinCalls:            20,
		FailureRatio:        0.5,
		ConsecutiveFailures: 20,
		OpenFor:             time.Second,
		MaxOpenFor:          60 * time.Second,
		BackoffAfter:        2 * time.Minute,
		Probes:              1,
		ProbeLease:          10 * time.Second,
		ProbeSuccesses:      3,
		Outliers:            1,
	}
}

// ErrInvalidPolicy is wrapped by every error that [Policy.Validate] returns.
var ErrInvalidPolicy = errors.New("invalid policy")

// PolicyError names the field of a [Policy] that cannot work, and why.
type PolicyError struct {
	Field  string
	Reason string
}

func (e *PolicyError) Error() string {
	return "coordinator: invalid policy: " + e.Field + " " + e.Reason
}

// Unwrap makes errors.Is(err, ErrInvalidPolicy) hold.
func (e *PolicyError) Unwrap() error { return ErrInvalidPolicy }

func invalid(field, format string, args ...any) error {
	return &PolicyError{Field: field, Reason: fmt.Sprintf(format, args...)}
}

// BucketWidth is the width of one window bucket: Window/Buckets rounded down
// to the millisecond.
func (p Policy) BucketWidth() time.Duration {
	if p.Buckets <= 0 {
		return 0
	}
	return (p.Window / time.Duration(p.Buckets)).Truncate(time.Millisecond)
}

// Validate reports the first field of p that cannot work, as a
// [*PolicyError] that wraps [ErrInvalidPolicy].
func (p Policy) Validate() error {
	if p.Window <= 0 {
		return invalid("Window", "must be positive, got %v", p.Window)
	}
	if p.Buckets <= 0 {
		return invalid("Buckets", "must be positive, got %d", p.Buckets)
	}
	if w := p.BucketWidth(); w < time.Millisecond {
		return invalid("Buckets", "makes buckets of %v (Window %v / %d); a bucket must be at least 1ms", p.Window/time.Duration(p.Buckets), p.Window, p.Buckets)
	}
	if err := checkRatio("FailureRatio", p.FailureRatio); err != nil {
		return err
	}
	if err := checkRatio("SlowCallRatio", p.SlowCallRatio); err != nil {
		return err
	}
	if p.ConsecutiveFailures < 0 {
		return invalid("ConsecutiveFailures", "must be 0 (off) or positive, got %d", p.ConsecutiveFailures)
	}
	if p.SlowCallDuration < 0 {
		return invalid("SlowCallDuration", "must be 0 (off) or positive, got %v", p.SlowCallDuration)
	}
	if p.SlowCallDuration > 0 && p.SlowCallDuration < time.Millisecond {
		return invalid("SlowCallDuration", "must be at least 1ms, got %v", p.SlowCallDuration)
	}
	if (p.SlowCallDuration > 0) != (p.SlowCallRatio > 0) {
		if p.SlowCallDuration > 0 {
			return invalid("SlowCallRatio", "must be set when SlowCallDuration is (%v); the slow-call rule needs both", p.SlowCallDuration)
		}
		return invalid("SlowCallDuration", "must be set when SlowCallRatio is (%v); the slow-call rule needs both", p.SlowCallRatio)
	}
	rateRule := p.FailureRatio > 0 || p.SlowCallRatio > 0
	if !rateRule && p.ConsecutiveFailures == 0 {
		return invalid("FailureRatio", "is 0 and so are ConsecutiveFailures and SlowCallRatio: no rule could ever trip the breaker")
	}
	if rateRule && p.MinCalls < 1 {
		return invalid("MinCalls", "must be at least 1 when a ratio rule is on, got %d", p.MinCalls)
	}
	if p.MinCalls < 0 {
		return invalid("MinCalls", "must not be negative, got %d", p.MinCalls)
	}
	if p.OpenFor < time.Millisecond {
		return invalid("OpenFor", "must be at least 1ms, got %v", p.OpenFor)
	}
	if p.MaxOpenFor < 0 || (p.MaxOpenFor > 0 && p.MaxOpenFor <= p.OpenFor) {
		return invalid("MaxOpenFor", "must be 0 (no back-off) or greater than OpenFor (%v), got %v", p.OpenFor, p.MaxOpenFor)
	}
	if p.BackoffAfter < 0 {
		return invalid("BackoffAfter", "must be 0 (double at once) or positive, got %v", p.BackoffAfter)
	}
	if p.Probes < 1 {
		return invalid("Probes", "must be at least 1, got %d", p.Probes)
	}
	if p.ProbeLease < time.Millisecond {
		return invalid("ProbeLease", "must be at least 1ms, got %v", p.ProbeLease)
	}
	if p.ProbeSuccesses < 1 {
		return invalid("ProbeSuccesses", "must be at least 1, got %d", p.ProbeSuccesses)
	}
	if p.RampFor < 0 || (p.RampFor > 0 && p.RampFor < time.Millisecond) {
		return invalid("RampFor", "must be 0 (off) or at least 1ms, got %v", p.RampFor)
	}
	if p.Throttle != 0 && !(p.Throttle >= 1 && !math.IsInf(p.Throttle, 1)) {
		return invalid("Throttle", "must be 0 (off) or a finite K of at least 1 (2 is typical), got %v", p.Throttle)
	}
	// In thousandths, as the ratio rule trips: failures*1000 >= permille*calls
	// at the held share (K−1)/K is permille*K <= 1000*(K−1).
	if p.Throttle != 0 && p.FailureRatio > 0 && float64(permille(p.FailureRatio))*p.Throttle <= 1000*(p.Throttle-1) {
		return invalid("FailureRatio", "must be above 1 − 1/K (%.4g for Throttle %v), got %v: the throttle holds the dependency at about that share of failures, so the ratio would trip where the throttle should hold; raise FailureRatio, lower Throttle, or set FailureRatio to 0",
			1-1/p.Throttle, p.Throttle, p.FailureRatio)
	}
	if p.Outliers < 0 || p.Outliers > MaxOutliers {
		return invalid("Outliers", "must be 0 (plain rules) to %d, got %d", MaxOutliers, p.Outliers)
	}
	return nil
}

// permille is r in thousandths, rounded as the coordinators compare
// ratios (implement.Permille, which cannot be imported here: it imports
// this package).
func permille(r float64) int { return int(math.Round(r * 1000)) }

func checkRatio(field string, r float64) error {
	switch {
	case r == 0:
		return nil
	case math.IsNaN(r) || r < 0:
		return invalid(field, "must be 0 (off) or between 0 and 1, got %v", r)
	case r >= 1:
		return invalid(field, "must be below 1, got %v: a rule that needs every call to fail is ConsecutiveFailures", r)
	}
	if pm := permille(r); pm <= 0 || pm >= 1000 {
		return invalid(field, "%v rounds to %d thousandths; it must land in 1..999", r, pm)
	}
	return nil
}

// IsSlow reports whether a call that took d counts as slow under p.
func (p Policy) IsSlow(d time.Duration) bool {
	return p.SlowCallDuration > 0 && d >= p.SlowCallDuration
}
