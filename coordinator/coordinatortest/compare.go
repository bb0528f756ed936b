package coordinatortest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cbgrpc/cbgrpc/coordinator"
	"github.com/cbgrpc/cbgrpc/coordinator/implement"
	"github.com/cbgrpc/cbgrpc/coordinator/memory"
)

// CompareOptions tunes [Compare].
type CompareOptions struct {
	Seeds int // operation sequences to run; 0 means 40
	Steps int // operations per sequence; 0 means 300

	// LoseState, when set, is called at random steps to make the
	// coordinator under test lose scope's state record, as an eviction or
	// a partial FLUSHDB would, leaving its window data: see [Compare].
	LoseState func(t *testing.T, sut coordinator.Coordinator, scope string)
}

// Compare drives the in-process coordinator (the reference) and the
// coordinator under test with the same random operation sequences, on the
// same fake clock, and fails at the first answer that differs in any field,
// generations included. When the coordinator under test is a
// [coordinator.Controller], operators' commands are in the mix. Compare
// counts the paths of the contract the sequences reached, logs the counts,
// and fails if any path was never reached.
//
// With opts.LoseState, losing a scope's state is one more step. The driver
// calls LoseState, moves the reference on to a scope of a new name, never
// used, and advances the clock by 1ms, past every generation minted
// before (fewer than 1000 are minted in a millisecond). So both
// coordinators read the scope as not born, and both give birth to it at
// their next write, in the same generation (rules 4 and 5). The calls
// admitted before the loss then go to the coordinator under test alone,
// which must report each of their outcomes and probe settlements stale;
// the reference runs the rest of the same operation, which gives birth to
// its scope just the same, and every other field must agree.
func Compare(t *testing.T, newCoordinator Factory, opts CompareOptions) {
	seeds, steps := opts.Seeds, opts.Steps
	if seeds <= 0 {
		seeds = 40
	}
	if steps <= 0 {
		steps = 300
	}
	var reached [numPaths]int
	controlled, pushed := false, false
	for seed := range seeds {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			d := newDriver(t, newCoordinator, opts, uint64(seed), &reached)
			controlled = controlled || d.ctl != nil
			pushed = pushed || d.pusher != nil
			d.run(steps)
		})
	}
	var counts, missing []string
	for i, n := range reached {
		if (i == pathLostState || i == pathFenced) && opts.LoseState == nil {
			continue
		}
		if i >= pathRejectedIsolated && !controlled || (i == pathPushed || i == pathPushSetPeriod) && !pushed {
			continue
		}
		counts = append(counts, fmt.Sprintf("%s %d", pathNames[i], n))
		if n == 0 {
			missing = append(missing, pathNames[i])
		}
	}
	t.Logf("paths reached in %d sequences of %d steps: %s", seeds, steps, strings.Join(counts, ", "))
	if len(missing) > 0 && !t.Failed() {
		t.Errorf("paths never reached: %s; run more or longer sequences", strings.Join(missing, ", "))
	}
}

const (
	pathOpened = iota
	pathAdmitted
	pathRejectedOpen
	pathRejectedProbeLimit
	pathLeaseExpired
	pathSettledSuccess
	pathSettledFailure
	pathClosedAgain
	pathStaleOutcome
	pathStaleSettle
	pathBornAgain
	pathBornAboveSeen
	pathRamping
	pathThrottled
	pathWouldReject
	pathReLaid
	pathOtherLayout
	pathPoliciesSeen
	pathOutlierFound
	pathOutlierStale
	pathOutlierLate
	pathOutlierReopened
	pathOutlierForgiven
	pathTripLeavingOut
	pathRecentTrip
	pathStalledTrip
	pathOutlierReplaced
	pathOutlierListed
	pathReplicasEvicted
	// with a coordinator.Pusher
	pathPushed
	pathPushSetPeriod
	// with LoseState
	pathLostState
	pathFenced
	// with a coordinator.Controller
	pathRejectedIsolated
	pathIsolated
	pathIsolationEnded
	pathReleased
	pathDisabled
	pathCountedDisabled
	pathEnabled
	pathOverrideSet
	pathOverrideReset
	pathAnsweredOverride
	numPaths
)

var pathNames = [numPaths]string{
	"opened", "admitted", "rejected while open", "rejected at the probe limit", "lease expired",
	"settled success", "settled failure", "closed again", "stale outcome", "stale settle",
	"born again after forgetting", "born above a generation seen", "admitted while ramping", "throttled counted",
	"would-be rejections counted",
	"window re-laid", "counted in another layout", "policies seen > 1",
	"outlier found", "outlier's outcomes stale", "outlier's late success after its period stale", "outlier's probe failed", "outlier's probe succeeded",
	"tripped leaving out replicas", "tripped by the recent rule", "tripped with stalls", "outlier replaced by a newer one", "outliers listed", "more replicas failed than tracked", "pushed open", "pushback set its trip's period", "lost state", "fenced after a loss",
	"rejected while isolated", "isolated", "isolation ended", "released", "disabled", "counted while disabled", "enabled",
	"override set", "override reset", "answered an override's version",
}

// comparePolicy is a small policy, so that short sequences trip, probe,
// reopen and close many times.
func comparePolicy(rng *rand.Rand) coordinator.Policy {
	p := coordinator.Policy{
		Window:         time.Second,
		Buckets:        10,
		MinCalls:       4,
		FailureRatio:   0.5,
		OpenFor:        100 * time.Millisecond,
		Probes:         2,
		ProbeLease:     300 * time.Millisecond,
		ProbeSuccesses: 2,
	}
	if rng.IntN(3) == 0 {
		p.ConsecutiveFailures = 3
	}
	// Most sequences judge the fleet without its most failing replicas.
	p.Outliers = []int{0, 1, 1, 2}[rng.IntN(4)]
	if rng.IntN(6) == 0 {
		p.FailureRatio, p.MinCalls, p.ConsecutiveFailures = 0, 0, 2
	}
	if rng.IntN(4) == 0 {
		p.SlowCallDuration, p.SlowCallRatio = 50*time.Millisecond, 0.5
		p.MinCalls = 4
	}
	if rng.IntN(2) == 0 {
		p.MaxOpenFor = 400 * time.Millisecond
		p.BackoffAfter = []time.Duration{0, 150 * time.Millisecond, 500 * time.Millisecond}[rng.IntN(3)]
	}
	if rng.IntN(2) == 0 {
		p.RampFor = 500 * time.Millisecond
	}
	if rng.IntN(2) == 0 {
		p.Throttle = 2
		if p.FailureRatio > 0 {
			p.FailureRatio = 0.75 // above the half that K 2 holds failing
		}
	}
	switch rng.IntN(4) {
	case 0:
		p.ProbeSuccesses = 1
	case 1:
		p.ProbeSuccesses = 3
	}
	return p
}

// altPolicy is the policy that other replicas of a scope run, from an
// operator's override: p with another layout of the window, and now and
// then another number of outliers left out.
func altPolicy(rng *rand.Rand, p coordinator.Policy) coordinator.Policy {
	if rng.IntN(3) == 0 {
		p.Outliers = (p.Outliers + 1) % 3
	}
	switch rng.IntN(3) {
	case 0:
		p.Window, p.Buckets = 600*time.Millisecond, 4
	case 1:
		p.Window, p.Buckets = 2*time.Second, 5
	default:
		p.Window, p.Buckets = time.Second, 4
	}
	return p
}

type driver struct {
	t       *testing.T
	rng     *rand.Rand
	clock   *Clock
	ref     *memory.Coordinator
	sut     coordinator.Coordinator
	lose    func(*testing.T, coordinator.Coordinator, string)
	ctl     coordinator.Controller // the coordinator under test, when it is one
	pusher  coordinator.Pusher     // the coordinator under test, when it is one
	reached *[numPaths]int

	scopes  []*cmpScope
	calls   []*call  // admitted, outcome not sent yet
	settled []*call  // settled probes, to settle again
	batches []*batch // recent batches with an ID, to retry
	next    int      // for unique claims and batch IDs
	step    int
	trail   []string // the last operations, for failure messages
}

type cmpScope struct {
	index   int
	name    string // the scope on the coordinator under test
	alias   string // the scope on the reference: a new one after each loss
	p       coordinator.Policy
	alt     coordinator.Policy // the policy of the replicas that run an override
	failing bool               // the dependency is failing: outcomes fail more often
	share   float64            // while failing, the share of calls that fail
	// bad is the replica of the scope that fails alone, "" while none does.
	bad string
	// failed are the replicas that failed in generation failedGen: more
	// of them than the coordinators track makes them evict.
	failed    map[string]bool
	failedGen uint64
	losses    int // for naming the reference's next scope
	// gen is the generation of the last answer about alias; 0 before the
	// first. prev is the one before it: the generation a breaker that
	// just opened opened from.
	gen, prev uint64
	// laid is the policy of the Record that laid the window out, in
	// generation laidGen, and laidAt the start of the last bucket a
	// Record of its layout counted in: the layout its window is written
	// with.
	laid    coordinator.Policy
	laidGen uint64
	laidAt  time.Time
	// outliers are the replicas the answers found outliers in generation
	// gen, with the end of each one's period.
	outliers map[string]time.Time
}

// call is one admitted call.
type call struct {
	s        *cmpScope
	claim    string
	probe    bool
	dry      bool // rejected, and let through by a dry run (Outcome.WouldReject)
	gen      uint64
	lost     bool      // admitted before the coordinator under test lost the scope's state
	leaseEnd time.Time // for probes
}

type batch struct {
	s       *cmpScope
	p       coordinator.Policy // the policy of the replica that records it
	replica string             // the replica that records it
	id      string
	calls   []*call
	outs    []coordinator.Outcome // without generations
	late    bool                  // an outlier's success after its period, not its probe
}

func newDriver(t *testing.T, f Factory, opts CompareOptions, seed uint64, reached *[numPaths]int) *driver {
	clock := NewClock()
	d := &driver{
		t:       t,
		rng:     rand.New(rand.NewPCG(seed, 0x636267727063)),
		clock:   clock,
		ref:     memory.New(memory.WithClock(clock.Now)),
		sut:     f(t, clock.Now),
		lose:    opts.LoseState,
		reached: reached,
	}
	d.ctl, _ = d.sut.(coordinator.Controller)
	d.pusher, _ = d.sut.(coordinator.Pusher)
	for i, name := range []string{"{α}|a", "b\n"} {
		s := &cmpScope{index: i, name: t.Name() + "/" + name, p: comparePolicy(d.rng), failing: d.rng.IntN(2) == 0}
		s.alias, s.alt = s.name, altPolicy(d.rng, s.p)
		d.scopes = append(d.scopes, s)
	}
	return d
}

func (d *driver) run(steps int) {
	for d.step = 0; d.step < steps; d.step++ {
		s := d.scopes[d.rng.IntN(len(d.scopes))]
		if d.rng.IntN(40) == 0 {
			s.failing = !s.failing
			// Brownouts of several shares, so that the recent rule trips
			// a window of successes as well as the window's ratio.
			s.share = []float64{0.6, 0.7, 0.8, 0.95}[d.rng.IntN(4)]
		}
		if d.rng.IntN(15) == 0 {
			s.bad = []string{"", "r0", "r1", "r2"}[d.rng.IntN(4)]
		}
		switch n := d.rng.IntN(100); {
		case n < 25:
			d.admit(s)
		case n < 27:
			d.admitSeen(s)
		case n < 32:
			d.readmit(s)
		case n < 46:
			d.record(s)
		case n < 49:
			d.probeOutlier(s)
		case n < 50:
			switch d.rng.IntN(3) {
			case 0:
				d.crowd(s)
			case 1:
				d.rollout(s)
			default:
				d.burst(s)
			}
		case n < 54:
			d.retryBatch(s)
		case n < 66:
			d.settle(s)
		case n < 70:
			d.settleStale(s)
		case n < 76:
			d.snapshot(s)
		case n < 79:
			d.abandon(s)
		case n < 81 && d.lose != nil:
			d.loseState(s)
		case n < 82 && d.ctl != nil:
			d.control(s)
		case n < 83 && d.ctl != nil:
			d.override(s)
		case n < 85 && d.pusher != nil:
			d.push(s)
		default:
			d.advance()
		}
		if len(d.calls) > 64 {
			d.calls = d.calls[1:]
		}
	}
}

func (d *driver) note(format string, args ...any) {
	line := fmt.Sprintf("step %d at +%v: ", d.step, d.clock.Now().Sub(Start)) + fmt.Sprintf(format, args...)
	if len(d.trail) == 12 {
		d.trail = d.trail[1:]
	}
	d.trail = append(d.trail, line)
}

func (d *driver) fail(format string, args ...any) {
	d.t.Helper()
	d.t.Fatalf("%s\npolicies: %+v\noverrides: %+v\nlast operations:\n  %s", fmt.Sprintf(format, args...),
		[]coordinator.Policy{d.scopes[0].p, d.scopes[1].p}, []coordinator.Policy{d.scopes[0].alt, d.scopes[1].alt}, strings.Join(d.trail, "\n  "))
}

func (d *driver) noErr(op string, refErr, sutErr error) {
	d.t.Helper()
	if refErr != nil {
		d.fail("%s: reference: %v", op, refErr)
	}
	if sutErr != nil {
		d.fail("%s: coordinator under test: %v", op, sutErr)
	}
}

func (d *driver) hit(path int) { d.reached[path]++ }

func (d *driver) now() time.Time { return d.clock.Now().Truncate(time.Millisecond) }

func (d *driver) advance() {
	step := time.Duration(1+d.rng.IntN(60)) * time.Millisecond
	if d.rng.IntN(10) == 0 {
		step = time.Duration(200+d.rng.IntN(2800)) * time.Millisecond
	}
	d.clock.Advance(step)
	d.note("advance %v", step)
}

// loseState makes the coordinator under test lose the state of s, and
// moves the reference on to a scope never used, a millisecond later.
func (d *driver) loseState(s *cmpScope) {
	d.lose(d.t, d.sut, s.name)
	d.eachCall(s, func(c *call) { c.lost = true })
	s.losses++
	s.alias = fmt.Sprintf("%s#lost-%d", s.name, s.losses)
	s.gen, s.prev = 0, 0
	d.clock.Advance(time.Millisecond)
	d.hit(pathLostState)
	d.note("lose state of s%d, advance 1ms", s.index)
}

// eachCall calls f on every call of s the driver still holds.
func (d *driver) eachCall(s *cmpScope, f func(*call)) {
	for _, list := range [][]*call{d.calls, d.settled} {
		for _, c := range list {
			if c.s == s {
				f(c)
			}
		}
	}
	for _, b := range d.batches {
		if b.s == s {
			for _, c := range b.calls {
				f(c)
			}
		}
	}
}

// learn notes the generation of an answer about s, and counts a birth
// after forgetting: a new generation without a transition.
func (d *driver) learn(s *cmpScope, gen uint64, t *coordinator.Transition) {
	if s.gen != 0 && gen != s.gen && t == nil {
		d.hit(pathBornAgain)
	}
	if gen != s.gen {
		s.prev, s.outliers = s.gen, nil
	}
	s.gen = gen
}

// samePolicyVersion compares the versions of s's override the two
// coordinators answered. A loss of state keeps the override (it is not
// the breaker's state), while the reference goes on under a new alias
// without it: after a loss, only the coordinator under test knows it.
func samePolicyVersion(s *cmpScope, ref, sut uint64) bool {
	return ref == sut || s.alias != s.name
}

// sameResult fails unless the answers of the two coordinators agree; lost
// is how many more stale the coordinator under test must report, for the
// outcomes it alone was sent.
func (d *driver) sameResult(s *cmpScope, op string, rr, sr coordinator.Result, lost int) {
	d.t.Helper()
	if rr.State != sr.State || rr.Generation != sr.Generation || rr.Stale+lost != sr.Stale || rr.RetryAfter != sr.RetryAfter || rr.RampLeft != sr.RampLeft ||
		!sameOutliers(outlierList(rr.Outlier), outlierList(sr.Outlier)) ||
		rr.Calls != sr.Calls || rr.Failures != sr.Failures || rr.Slow != sr.Slow || rr.Throttled != sr.Throttled || !samePolicyVersion(s, rr.PolicyVersion, sr.PolicyVersion) {
		var why string
		if lost > 0 {
			why = fmt.Sprintf(" (want %d more stale: admitted before a loss)", lost)
		}
		d.fail("%s on s%d: reference %s, coordinator under test %s%s", op, s.index, showResult(rr), showResult(sr), why)
	}
	d.sameTransition(s, op, rr.Transition, sr.Transition)
	d.learn(s, rr.Generation, rr.Transition)
}

func (d *driver) sameTransition(s *cmpScope, op string, r, su *coordinator.Transition) {
	d.t.Helper()
	if r == nil && su == nil {
		return
	}
	if r == nil || su == nil || su.Scope != s.name || r.From != su.From || r.To != su.To || r.Generation != su.Generation ||
		!r.At.Equal(su.At) || !r.OpenUntil.Equal(su.OpenUntil) || r.Reason != su.Reason || r.Replica != su.Replica {
		d.fail("%s on s%d: reference transition %s, coordinator under test %s (scope %q, want %q)",
			op, s.index, showTransition(r), showTransition(su), scopeOf(su), s.name)
	}
	switch {
	case r.Replica != "" && r.To == coordinator.StateOpen && r.From == coordinator.StateClosed:
		d.hit(pathOutlierFound)
		d.outlierFound(s, r)
	case r.Replica != "" && r.To == coordinator.StateOpen:
		d.hit(pathOutlierReopened)
		s.outliers[r.Replica] = r.OpenUntil
	case r.Replica != "":
		d.hit(pathOutlierForgiven)
		delete(s.outliers, r.Replica)
	case r.To == coordinator.StateOpen && r.From == coordinator.StateClosed:
		d.hit(pathOpened)
		if strings.Contains(r.Reason, "leaving out") {
			d.hit(pathTripLeavingOut)
		}
		if strings.HasPrefix(r.Reason, "recent ") {
			d.hit(pathRecentTrip)
		}
		if strings.Contains(r.Reason, " stalled") {
			d.hit(pathStalledTrip)
		}
	case r.To == coordinator.StateClosed && r.From == coordinator.StateHalfOpen:
		d.hit(pathClosedAgain)
	case r.To == coordinator.StateIsolated:
		d.hit(pathIsolated)
	case r.To == coordinator.StateDisabled:
		d.hit(pathDisabled)
	case r.Reason == implement.IsolationEnded:
		d.hit(pathIsolationEnded)
	case r.From == coordinator.StateDisabled && strings.HasPrefix(r.Reason, "enabled"):
		d.hit(pathEnabled)
	case r.To == coordinator.StateClosed:
		d.hit(pathReleased)
	}
}

// outlierFound notes the outlier t made, in the generation of s the
// answer was about, and counts the replicas whose spell it ended: outliers
// found before, whose period ended less than the shortest window of the
// policies ago (so that none has died of age), that the reference no
// longer lists.
func (d *driver) outlierFound(s *cmpScope, t *coordinator.Transition) {
	if s.gen != t.Generation {
		s.outliers = nil
	}
	s.gen = t.Generation
	var listed []coordinator.Outlier
	for id, until := range s.outliers {
		if id == t.Replica || !d.clock.Now().Before(until.Add(min(s.p.Window, s.alt.Window))) {
			continue
		}
		if listed == nil {
			snap, err := d.ref.Snapshot(context.Background(), s.alias, s.p)
			d.noErr("Snapshot", err, nil)
			listed = append(snap.Outliers, coordinator.Outlier{})
		}
		if !slices.ContainsFunc(listed, func(o coordinator.Outlier) bool { return o.Replica == id }) {
			d.hit(pathOutlierReplaced)
			delete(s.outliers, id)
		}
	}
	if s.outliers == nil {
		s.outliers = make(map[string]time.Time)
	}
	s.outliers[t.Replica] = t.OpenUntil
}

// dueOutlier is a replica s's answers found an outlier whose period has
// ended, so that its next Record is its probe; "" if none.
func (d *driver) dueOutlier(s *cmpScope) string {
	var due []string
	for id, until := range s.outliers {
		if !d.clock.Now().Before(until) {
			due = append(due, id)
		}
	}
	if len(due) == 0 {
		return ""
	}
	slices.Sort(due)
	return due[d.rng.IntN(len(due))]
}

func outlierList(o *coordinator.Outlier) []coordinator.Outlier {
	if o == nil {
		return nil
	}
	return []coordinator.Outlier{*o}
}

func scopeOf(t *coordinator.Transition) string {
	if t == nil {
		return ""
	}
	return t.Scope
}

func showTransition(t *coordinator.Transition) string {
	if t == nil {
		return "none"
	}
	return fmt.Sprintf("{%v -> %v gen %d at %s until %s %q replica %q}", t.From, t.To, t.Generation, since(t.At), since(t.OpenUntil), t.Reason, t.Replica)
}

func showDecision(d coordinator.Decision) string {
	return fmt.Sprintf("{%v %v gen %d retry %v ramp %v transition %s}", d.Verdict, d.State, d.Generation, d.RetryAfter, d.RampLeft, showTransition(d.Transition))
}

func showResult(r coordinator.Result) string {
	return fmt.Sprintf("{%v gen %d stale %d retry %v ramp %v window %d/%d/%d throttled %d transition %s outlier %s}", r.State, r.Generation, r.Stale, r.RetryAfter, r.RampLeft,
		r.Calls, r.Failures, r.Slow, r.Throttled, showTransition(r.Transition), showOutlier(r.Outlier))
}

func showSnapshot(s coordinator.Snapshot) string {
	var policies []string
	for _, p := range s.Policies {
		policies = append(policies, fmt.Sprintf("%s@%s/%v", p.Fingerprint, since(p.At), p.Source))
	}
	var outliers []string
	for _, o := range s.Outliers {
		outliers = append(outliers, showOutlier(&o))
	}
	return fmt.Sprintf("{%v gen %d calls %d failures %d slow %d throttled %d would reject %d consecutive %d opened %s until %s probes %d successes %d operator %+v forced %s last trip %s %q gen %d %d/%d/%d outliers %v policies %v}",
		s.State, s.Generation, s.Calls, s.Failures, s.Slow, s.Throttled, s.WouldReject, s.ConsecutiveFailures, since(s.OpenedAt), since(s.OpenUntil),
		s.ProbesInFlight, s.ProbeSuccesses, s.Operator, since(s.ForcedAt),
		since(s.LastTrip.At), s.LastTrip.Reason, s.LastTrip.Generation, s.LastTrip.Calls, s.LastTrip.Failures, s.LastTrip.Slow, outliers, policies)
}

func showOutlier(o *coordinator.Outlier) string {
	if o == nil {
		return "none"
	}
	return fmt.Sprintf("{%q since %s until %s retry %v %q}", o.Replica, since(o.Since), since(o.Until), o.RetryAfter, o.Reason)
}

// since shows a time of the clock as the time since [Start].
func since(t time.Time) string {
	if t.IsZero() {
		return "0"
	}
	return "+" + t.Sub(Start).String()
}
