package coordinator

import (
	"context"
	"errors"
	"time"
)

// ErrCorruptState is wrapped by a coordinator's error when one scope's
// stored state cannot be used (a key of the wrong type, data a script
// cannot read), as opposed to the coordinator being unreachable: the
// caller should treat that scope as undecidable without concluding that
// every other scope is too.
var ErrCorruptState = errors.New("the scope's stored state is unusable")

// Coordinator runs the breaker's operations on shared state. Each method is
// one atomic operation that reads the coordinator's clock once and reports
// what it did, including the transition it caused, if any. Implementations
// keep no client-side state: no caches, no goroutines.
//
// The policy is passed with every call so that the state stays the only
// thing the coordinator stores; an invalid policy is an error. A scope is
// any bytes but none: every operation that writes refuses the empty scope
// ([CheckScope], [ErrInvalidScope]), which no call has, and Snapshot reads
// it as not born.
type Coordinator interface {
	// Admit asks whether a call may go through. The request's Claim is a
	// unique ID the caller makes for one logical admission; admitting the
	// same claim again (a retry after a network error) never takes a
	// second probe slot.
	Admit(ctx context.Context, r AdmitRequest) (Decision, error)

	// Record adds the outcomes of calls admitted with Allow, in order.
	// Outcomes of another generation, or sent while the breaker is not
	// closed, are stale and change nothing; so are those of a batch whose
	// BatchID the coordinator remembers (a retry).
	//
	// The coordinator attributes the failures and slow calls to the
	// request's Replica: a rule trips the breaker for the fleet only if
	// it still holds without the Policy.Outliers replicas that contribute
	// most to it, and a replica whose own outcomes trip the rules while
	// the fleet's do not is an outlier, which Result.Outlier tells it
	// (see [Outlier]).
	//
	// Every Record carries its policy, with its Source, for
	// Snapshot.Policies: stale or not, whatever the state, since it tells
	// what the replica runs, not what was counted. A Record that counts
	// outcomes under another Window or Buckets than the window was written
	// with counts them in the window's layout while a Record of that
	// layout counted in a bucket that started within a window of it (its replicas still record, as
	// in a rolling deploy): every count keeps its age exactly. Once none
	// did, it first re-lays the window by time into its own layout: the
	// counts of each bucket live under the old layout go to the bucket of
	// the policy's layout that holds the old bucket's first millisecond,
	// so that none is counted twice and none moves later than it was
	// counted; counts whose bucket starts before the new window have left
	// it. The generation and the run of failures stay.
	Record(ctx context.Context, r RecordRequest) (Result, error)

	// Settle reports the outcome of the probe admitted with the request's
	// Claim. A claim that holds no live lease (unknown, expired or already
	// settled) is stale and changes nothing.
	Settle(ctx context.Context, r SettleRequest) (Result, error)

	// Snapshot reports the scope's state as of now without changing it:
	// looking never uses up a probe. It reads the window with the layout
	// (Window, Buckets) the window was written with, and p's only when it
	// stores none, so that a reader with another policy reads it right.
	Snapshot(ctx context.Context, scope string, p Policy) (Snapshot, error)
}

// Decision is the answer to Admit.
type Decision struct {
	Verdict    Verdict
	State      State         // state after the decision
	Generation uint64        // generation the admitted call belongs to
	RetryAfter time.Duration // on Reject: time until a probe slot may be free, or until an isolation for a set time ends (0 when isolated until released)
	RampLeft   time.Duration // closed, with Policy.RampFor set: what is left of the ramp after the last recovery (0: none)
	Transition *Transition   // non-nil when this admission moved the breaker (open -> half-open, or an ended isolation -> closed)
	// PolicyVersion is the version of the scope's override
	// ([Controller.SetOverride]; [PolicyLayer].Version), after a reset the
	// reset's, 0 when none was ever set: a caller that runs on another
	// version reads the override again.
	PolicyVersion uint64
	// Cause is the traceparent of the span that recorded the transition
	// into the scope's state ([CauseKeeper]), when the state is neither
	// closed nor disabled, or RampLeft is set; empty otherwise, and while
	// no cause is kept.
	Cause string
}

// Outcome is the result of one admitted call, a request the caller
// throttled (Policy.Throttle), or a call a dry run let through that it
// would have rejected.
type Outcome struct {
	Generation uint64 // the Decision.Generation of the admission that let the call through
	Failure    bool
	Duration   time.Duration // compared with Policy.SlowCallDuration
	// Stalled marks a call the caller reported while it was still
	// running, past how long the scope's calls take when healthy (a
	// dependency that stops answering has no outcomes until the callers'
	// deadlines): it counts as a failure, whatever Failure says, and the
	// caller sends no other outcome for it. A trip whose run of failures,
	// or recent excursion, holds stalled calls says how many in its
	// reason ("consecutive failures 20 >= 20, 20 stalled").
	Stalled bool
	// Probe marks the outcome of the call a replica the coordinator found
	// an outlier let through as its probe, its period over
	// (Result.Outlier): of the current generation, the first so marked
	// ends the spell or starts another period. The replica's other
	// outcomes are stale until then, those of calls it let through before
	// its spell and that ended late among them.
	Probe bool
	// Throttled marks a request of the closed generation that the caller
	// rejected itself by adaptive throttling: the window counts it as a
	// request, never as a call, a failure or a slow call, and it neither
	// breaks nor extends a run of failures, nor checks the trip rules.
	// Failure and Duration are then ignored.
	Throttled bool
	// WouldReject marks a call that a dry-run replica let through though
	// it would have rejected it (cbgrpc.WithDryRun): no call of the
	// window, never stale, in any state. The coordinator adds it to
	// Snapshot.WouldReject when it carries the current generation and the
	// batch is not one it remembers counting (RecordRequest.BatchID); a
	// batch of such outcomes alone is not remembered, so a retry of it
	// may count them again: they are for people to read, and the rules
	// never read them. The other fields are then ignored.
	WouldReject bool
}

// Failed reports whether o counts as a failed call: a failure, or a
// stalled call.
func (o Outcome) Failed() bool { return o.Failure || o.Stalled }

// Transition is one change of a breaker's state.
type Transition struct {
	Scope      string
	From, To   State
	Generation uint64    // generation after the transition
	At         time.Time // the coordinator's clock
	Reason     string    // human readable: "failures 3/4 >= 50%", "probe failed", ...
	// Replica is set when the transition is one replica's alone, not the
	// scope's: the replica was found an outlier (closed -> open), its
	// probe failed (half-open -> open), or its probe succeeded (half-open
	// -> closed); Generation is then the scope's, unchanged. See
	// [Outlier]. The transition feed never carries these.
	Replica string
	// OpenUntil is when the state moved to ends by itself, on the
	// coordinator's clock: the end of the open period (To open) or of an
	// isolation for a set time (To isolated); zero otherwise. A listener
	// whose clock differs from the coordinator's counts OpenUntil.Sub(At)
	// from when it heard.
	OpenUntil time.Time
	// Cause is the traceparent of the span that recorded the transition
	// ([CauseKeeper]). An operation's answer never carries it: the span is
	// made from the answer. The feed delivers the transition a second time
	// with it, once the replica that made it kept it.
	Cause string
}

// Result is what Record, Settle and the [Controller] methods report.
type Result struct {
	State      State  // as of now
	Generation uint64 // after the operation
	Stale      int    // outcomes or settlements ignored as stale
	// RetryAfter is, when State is open, the time until its open period
	// ends; when isolated for a set time, until the isolation ends; zero
	// otherwise. It is what tells a caller that the open period is not
	// OpenFor: each reopening doubles it (Policy.MaxOpenFor).
	RetryAfter time.Duration
	// RampLeft is, when State is closed and Policy.RampFor is set, what is
	// left of the ramp that follows a recovery (a close after open,
	// half-open or isolated), by the coordinator's clock; zero otherwise.
	RampLeft time.Duration
	// Calls, Failures and Slow are, after a Record that counted outcomes
	// and left the breaker closed or disabled, the window's counts of the
	// current generation over the live buckets, as [Snapshot] gives them:
	// how far the scope is from tripping. Throttled is the window's count
	// of throttled requests, beside them. Zero otherwise.
	Calls, Failures, Slow, Throttled int
	// Transition is the transition the operation made, if any: the
	// scope's, or, from a Record that made none, its replica's as an
	// outlier (Transition.Replica set).
	Transition *Transition
	// Outlier is, after a Record, the Record's replica as an outlier of
	// the scope, as of now: nil when it is none.
	Outlier *Outlier
	// PolicyVersion is, as in [Decision], the version of the scope's
	// override.
	PolicyVersion uint64
	// Cause is, as in [Decision], the traceparent of the span that
	// recorded the transition into the scope's state.
	Cause string
	// Replicas says, for the [Controller] methods, whether the change
	// reached the coordinator's replicas; it is zero for Record and Settle,
	// and when there were no replicas to wait for.
	Replicas Replication
}

// Snapshot is a read-only view of one scope, as of now: an open breaker
// whose open period has ended reads half-open. A scope that is not born
// (never used, or forgotten after an idle window, or whose state record
// was lost) reads closed in generation 0 with nothing counted: looking
// does not give birth to it (see implement.NextGeneration).
type Snapshot struct {
	Scope      string
	State      State
	Generation uint64

	// Window counts of the current generation, over the live buckets:
	// calls, failures, slow calls, and requests throttled by the callers
	// (Outcome.Throttled), which are no calls.
	Calls, Failures, Slow, Throttled int
	// WouldReject counts, in the current generation, the calls that
	// dry-run replicas let through and would have rejected
	// (Outcome.WouldReject): what enforcing them would have cost. It is
	// 0 again in each new generation, kept from open to half-open.
	WouldReject int
	// ConsecutiveFailures is the current run of failures while closed.
	ConsecutiveFailures int

	OpenedAt  time.Time // when the breaker last opened or was isolated; zero if it never was in this generation line
	OpenUntil time.Time // end of the current open period, or of an isolation for a set time; zero otherwise

	ProbesInFlight int // live probe leases
	ProbeSuccesses int // successful probes in this half-open period

	// Operator is the note of the operator who isolated or disabled the
	// breaker (see [Controller]), and ForcedAt when; both are zero in the
	// other states.
	Operator Note
	ForcedAt time.Time

	// LastTrip is why and when the breaker last opened by its own rules,
	// kept through recovery until the scope is forgotten: it tells an
	// operator why a breaker that now reads open, or closed again, opened.
	LastTrip Trip

	// Outliers are the replicas that the coordinator found failing alone
	// (see [Outlier]), by replica; empty when there are none.
	Outliers []Outlier

	// Policies are the distinct policies that Records carried within the
	// last window, newest first: the first is the policy in force. More
	// than one means the replicas disagree (a rolling deploy, a replica
	// yet to apply an override), or that the policy changed within the
	// window: the old one leaves the list a window after its last Record.
	// Empty when no Record came.
	Policies []CarriedPolicy

	// Corrupt is set in a listing ([Lister]) only, on a scope whose stored
	// state cannot be read: the error reading it failed with, which wraps
	// [ErrCorruptState]. Every other field but Scope is then zero.
	Corrupt error
}

// Trip is one opening of a breaker by its rules: a trip from closed, or a
// failed probe. It is zero when the breaker has not opened since it was
// born.
type Trip struct {
	At         time.Time // the coordinator's clock
	Reason     string    // as the transition said: "failures 12/20 >= 50%", "probe failed"
	Generation uint64    // the open generation it started
	// The window's counts at the trip, the outcome that tipped it
	// included; zero for a failed probe, which counts no window.
	Calls, Failures, Slow int
}
