package memory

import (
	"fmt"
	"slices"
	"time"

	"github.com/cbgrpc/cbgrpc/coordinator"
	"github.com/cbgrpc/cbgrpc/coordinator/implement"
)

// rules is a validated policy in the units the breaker computes with:
// milliseconds and thousandths.
type rules struct {
	p                  coordinator.Policy
	width              int64 // bucket width, ms
	buckets            int64
	failPm, slowPm     int
	openFor, maxOpen   int64
	backoffAfter       int64
	lease              int64
	probes, successes  int
	consecutive, calls int
	rampFor            int64
}

func newRules(p coordinator.Policy) *rules {
	return &rules{
		p:            p,
		width:        p.BucketWidth().Milliseconds(),
		buckets:      int64(p.Buckets),
		failPm:       implement.Permille(p.FailureRatio),
		slowPm:       implement.Permille(p.SlowCallRatio),
		openFor:      p.OpenFor.Milliseconds(),
		maxOpen:      p.MaxOpenFor.Milliseconds(),
		backoffAfter: p.BackoffAfter.Milliseconds(),
		lease:        p.ProbeLease.Milliseconds(),
		rampFor:      p.RampFor.Milliseconds(),
		probes:       p.Probes,
		successes:    p.ProbeSuccesses,
		consecutive:  p.ConsecutiveFailures,
		calls:        p.MinCalls,
	}
}

// bucket counts one slice of the window: calls, failures and slow calls,
// and the requests callers throttled (Outcome.Throttled), which are no
// calls.
type bucket struct{ calls, failures, slow, throttled int }

// breaker is one scope's state. All times are Unix milliseconds of the
// coordinator's clock.
type breaker struct {
	scope string
	state coordinator.State
	gen   uint64

	openedAt, openUntil int64
	openFor             int64 // the current open period; doubles on reopening
	// failingSince is when the breaker last left closed, kept while it
	// reopens (Policy.BackoffAfter); 0 while closed.
	failingSince int64
	// pushable is, while open by the rules, the generation it opened
	// from: a pushback answered to a call of it may still set the open
	// period (push). 0 otherwise.
	pushable  uint64
	consec    int
	stalls    int // the stalled calls in the run (Outcome.Stalled)
	successes int // probe successes in this half-open period
	// wouldReject counts the calls dry-run replicas would have rejected
	// in this generation (Outcome.WouldReject).
	wouldReject int
	leases      map[string]int64 // claim -> deadline, only in half-open
	window      map[int64]*bucket
	// swept is where add last dropped the buckets that left the window,
	// and summed the window's live sum there (sum.go): a Record reads both
	// after every outcome.
	swept  place
	summed liveSum
	// current is the window's bucket at swept, once add found it: the
	// outcomes of a batch mostly fall in one bucket.
	current *bucket
	// width and buckets are the layout the window was written with (see
	// layout.go); 0 while nothing is written to it. laidAt is the start
	// of the last bucket a Record of that layout counted in.
	width, buckets int64
	laidAt         int64
	batches        []string // recent batch IDs, oldest first
	// expiresAt is when a closed breaker has nothing left worth keeping:
	// every bucket it wrote has left the window.
	expiresAt int64

	// note and forcedAt are what the operator said when isolating or
	// disabling the breaker, and when.
	note     coordinator.Note
	forcedAt int64

	// lastTrip is the last opening by the rules (Snapshot.LastTrip).
	lastTrip coordinator.Trip
	// recoveredAt is when the current closed generation began after the
	// breaker was open, half-open or isolated (ms; 0: it did not), the
	// start of the ramp (Policy.RampFor).
	recoveredAt int64

	// policies are the policies Records carried, by fingerprint
	// (carriedpolicies.go).
	policies map[string]carriedPolicy

	// replicas are the replicas that failed in the generation, reporters
	// those that recorded lately (in any generation), and epoch numbers
	// the fleet's run of failures, so that a replica's share of an ended
	// run reads as none (replicas.go).
	replicas  map[string]*tracked
	reporters []reporter
	epoch     int64
	// recent is the fleet's excursion of the recent rule (recent.go).
	recent recent

	// lapsed is the transition the current operation made before its own
	// work (an isolation whose time had passed), reported by the
	// operation unless it makes one of its own.
	lapsed *coordinator.Transition

	// moved is the last transition of the scope the feed carried, and
	// cause what its maker kept as the span that recorded it (cause.go),
	// "" until then: the next transition ends it.
	moved *coordinator.Transition
	cause string
}

// born gives birth to scope in a new generation, above the generation of
// what it replaces (an expired breaker, or state older than seen), if
// anything, and above seen: rule 4 (docs/architecture.md).
func born(scope string, old *breaker, seen uint64, r *rules, now int64) *breaker {
	prev := seen
	if old != nil {
		prev = max(prev, old.gen)
	}
	return &breaker{scope: scope, gen: implement.NextGeneration(prev, time.UnixMilli(now)), expiresAt: r.keep(now)}
}

// keep is when a closed generation that has just been written at now may
// be forgotten: once every bucket it could write has left the window.
func (r *rules) keep(now int64) int64 {
	return (now/r.width + r.buckets) * r.width
}

// expired reports whether the breaker is closed and past keeping: it is
// then as good as not born.
func (b *breaker) expired(now int64) bool {
	return b.state == coordinator.StateClosed && now >= b.expiresAt
}

func ms(d int64) time.Duration { return time.Duration(d) * time.Millisecond }

// timeOf is the time of ms Unix milliseconds; 0 is the zero time (none).
func timeOf(ms int64) time.Time {
	if ms == 0 {
		return time.Time{}
	}
	return time.UnixMilli(ms)
}

func (b *breaker) transition(from coordinator.State, now int64, reason string) *coordinator.Transition {
	t := &coordinator.Transition{
		Scope: b.scope, From: from, To: b.state, Generation: b.gen,
		At: time.UnixMilli(now), Reason: reason,
	}
	if (b.state == coordinator.StateOpen || b.state == coordinator.StateIsolated) && b.openUntil != 0 {
		t.OpenUntil = time.UnixMilli(b.openUntil)
	}
	return t
}

// report is the transition an operation reports: its own, or else the
// lapse it started with.
func (b *breaker) report(own *coordinator.Transition) *coordinator.Transition {
	if own != nil {
		return own
	}
	return b.lapsed
}

// stateAt is the state as of now: an open breaker whose period ended reads
// half-open, without changing anything.
func (b *breaker) stateAt(now int64) coordinator.State {
	if b.state == coordinator.StateOpen && now >= b.openUntil {
		return coordinator.StateHalfOpen
	}
	return b.state
}

// retryAfter is how long until the open period, or an isolation for a set
// time, ends; 0 in any other state, or once it has ended.
func (b *breaker) retryAfter(now int64) time.Duration {
	if (b.state == coordinator.StateOpen || b.state == coordinator.StateIsolated) && b.openUntil > now {
		return ms(b.openUntil - now)
	}
	return 0
}

// isolationOver reports whether the breaker is isolated for a set time
// that has passed: the next operation that writes releases it.
func (b *breaker) isolationOver(now int64) bool {
	return b.state == coordinator.StateIsolated && b.openUntil != 0 && now >= b.openUntil
}

// lapse releases an isolation whose time has passed, lazily, like an open
// period ends, and returns the transition; nil if there is none.
func (b *breaker) lapse(r *rules, now int64) *coordinator.Transition {
	if !b.isolationOver(now) {
		return nil
	}
	b.close(r, now)
	return b.transition(coordinator.StateIsolated, now, implement.IsolationEnded)
}

func (b *breaker) admit(r *rules, now int64, claim string) coordinator.Decision {
	switch b.state {
	case coordinator.StateOpen:
		if now < b.openUntil {
			return coordinator.Decision{Verdict: coordinator.Reject, State: b.state, Generation: b.gen, RetryAfter: ms(b.openUntil - now)}
		}
		b.state = coordinator.StateHalfOpen
		b.successes = 0
		t := b.transition(coordinator.StateOpen, now, "open period ended")
		d := b.claimProbe(r, now, claim)
		d.Transition = t
		return d
	case coordinator.StateHalfOpen:
		return b.claimProbe(r, now, claim)
	case coordinator.StateIsolated:
		return coordinator.Decision{Verdict: coordinator.Reject, State: b.state, Generation: b.gen, RetryAfter: b.retryAfter(now)}
	}
	return coordinator.Decision{Verdict: coordinator.Allow, State: b.state, Generation: b.gen, RampLeft: b.rampLeft(r, now), Transition: b.report(nil)}
}

// rampLeft is what is left at now of the ramp that follows a recovery
// (Policy.RampFor); 0 when there is none.
func (b *breaker) rampLeft(r *rules, now int64) time.Duration {
	if b.state != coordinator.StateClosed || b.recoveredAt == 0 || r.rampFor == 0 || now >= b.recoveredAt+r.rampFor {
		return 0
	}
	return ms(b.recoveredAt + r.rampFor - now)
}

func (b *breaker) pruneLeases(now int64) {
	for c, deadline := range b.leases {
		if deadline <= now {
			delete(b.leases, c)
		}
	}
}

func (b *breaker) claimProbe(r *rules, now int64, claim string) coordinator.Decision {
	b.pruneLeases(now)
	d := coordinator.Decision{Verdict: coordinator.Probe, State: b.state, Generation: b.gen}
	if _, ok := b.leases[claim]; ok {
		return d
	}
	if len(b.leases) < r.probes {
		if b.leases == nil {
			b.leases = make(map[string]int64, r.probes)
		}
		b.leases[claim] = now + r.lease
		return d
	}
	earliest := int64(-1)
	for _, deadline := range b.leases {
		if earliest < 0 || deadline < earliest {
			earliest = deadline
		}
	}
	d.Verdict = coordinator.Reject
	d.RetryAfter = ms(earliest - now)
	return d
}

func (b *breaker) result(r *rules, now int64, stale int, t *coordinator.Transition) coordinator.Result {
	res := coordinator.Result{State: b.stateAt(now), Generation: b.gen, Stale: stale, RetryAfter: b.retryAfter(now),
		RampLeft: b.rampLeft(r, now), Transition: b.report(t)}
	res.Cause = b.causeOf(res.State, res.RampLeft, res.Transition)
	return res
}

func (b *breaker) seenBatch(id string) bool {
	return id != "" && slices.Contains(b.batches, id)
}

func (b *breaker) rememberBatch(id string) {
	if id == "" {
		return
	}
	if len(b.batches) == implement.RecentBatches {
		b.batches = slices.Delete(b.batches, 0, 1)
	}
	b.batches = append(b.batches, id)
}

func (b *breaker) record(r *rules, now int64, q coordinator.RecordRequest) coordinator.Result {
	outcomes := q.Outcomes
	if slices.ContainsFunc(outcomes, func(o coordinator.Outcome) bool { return o.WouldReject }) {
		// No calls: counted whatever the state, then left out.
		if !b.seenBatch(q.BatchID) {
			for _, o := range outcomes {
				if o.WouldReject && o.Generation == b.gen {
					b.wouldReject++
				}
			}
		}
		outcomes = slices.DeleteFunc(slices.Clone(outcomes), func(o coordinator.Outcome) bool { return o.WouldReject })
		q.Outcomes = outcomes
	}
	r, own := b.layFor(r, now)
	if (b.state != coordinator.StateClosed && b.state != coordinator.StateDisabled) || b.seenBatch(q.BatchID) {
		res := b.result(r, now, len(outcomes), nil)
		if t := b.replicas[q.Replica]; t != nil && r.p.Outliers > 0 && !b.dead(t, r, now) {
			res.Outlier = t.outlier(now)
		}
		return res
	}
	var x *tracked
	if r.p.Outliers > 0 {
		x = b.replica(q.Replica, r, now)
	}
	var t *coordinator.Transition
	stale, counted, start := 0, 0, 0
	if x != nil && x.until != 0 {
		// An outlier: its outcomes are stale while its period lasts, and
		// after it until its probe, the first of the generation so marked.
		probe := slices.IndexFunc(outcomes, func(o coordinator.Outcome) bool { return o.Generation == b.gen && o.Probe && !o.Throttled })
		if now < x.until || probe < 0 {
			res := b.result(r, now, len(outcomes), nil)
			res.Outlier = x.outlier(now)
			return res
		}
		if o := outcomes[probe]; o.Failed() || r.p.IsSlow(o.Duration) {
			t = b.reisolate(x, r, now)
			b.rememberBatch(q.BatchID)
			res := b.result(r, now, len(outcomes)-1, t)
			res.Outlier = x.outlier(now)
			return res
		}
		t = b.forgive(x, now)
		x, stale, start = nil, probe, probe
	}
	if slices.ContainsFunc(outcomes[start:], func(o coordinator.Outcome) bool { return o.Generation == b.gen }) {
		// Counting: in the layout layFor gave, which the replicas heard
		// are judged in too.
		b.relay(r, now)
		if own {
			b.laidAt = now / r.width * r.width
		}
		if x != nil && b.replicas[x.id] != x {
			x = nil // re-laid with nothing left: it starts afresh
		}
		if r.p.Outliers > 0 {
			b.heard(q.Replica, r, now)
		}
	}
	done := false
	var p pace
	if counting := slices.ContainsFunc(outcomes[start:], func(o coordinator.Outcome) bool { return o.Generation == b.gen }); counting {
		p = b.paceOf(r, now)
	}
	for _, o := range outcomes[start:] {
		if done || o.Generation != b.gen {
			stale++
			continue
		}
		counted++
		b.add(r, now, o)
		// A throttled request is no call: the rules read nothing it changed.
		if o.Throttled {
			continue
		}
		recently := false
		if bad := o.Failed() || r.p.IsSlow(o.Duration); bad || r.p.Outliers == 0 || x.joined(b.recent.number) {
			recently = b.recent.count(r, p, now, o, r.p.IsSlow(o.Duration))
		}
		if r.p.Outliers > 0 {
			x = b.attribute(x, q.Replica, r, now, o, recently)
		}
		if b.state == coordinator.StateDisabled {
			continue
		}
		if reason := b.tripReason(r, p, now, o); reason != "" {
			calls, failures, slow := b.counts(r, now)
			b.openByRules(r.openFor, now)
			b.tripped(now, reason, calls, failures, slow)
			t, x, done = b.transition(coordinator.StateClosed, now, reason), nil, true
		} else if x != nil && (o.Failed() || r.p.IsSlow(o.Duration)) {
			// A replica is found an outlier by its failures and slow
			// calls alone, as the recent rule trips.
			if reason := b.ownReason(x, r, p, now); reason != "" {
				t, done = b.isolate(x, r, now, reason), true
			}
		}
	}
	res := b.result(r, now, stale, t)
	res.Outlier = x.outlier(now)
	if counted > 0 {
		b.rememberBatch(q.BatchID)
		if b.state == coordinator.StateClosed || b.state == coordinator.StateDisabled {
			res.Calls, res.Failures, res.Slow = b.counts(r, now)
			res.Throttled = b.throttled(r, now)
		}
	}
	return res
}

func (b *breaker) add(r *rules, now int64, o coordinator.Outcome) {
	b.relay(r, now)
	idx := now / r.width
	here := place{idx, r.width, r.buckets}
	gone := false
	if b.swept != here {
		b.swept, b.current, gone = here, nil, len(b.window) > 0
		for i := range b.window {
			if i <= idx-r.buckets {
				delete(b.window, i)
				b.summed.forget()
			} else {
				gone = false
			}
		}
	}
	if gone {
		// Every bucket has left the window, which starts afresh: the
		// replicas dead in it stay dead.
		b.dropDead(r, now)
	}
	bk := b.current
	if bk == nil {
		if b.window == nil {
			b.window = make(map[int64]*bucket, r.buckets)
		}
		if bk = b.window[idx]; bk == nil {
			bk = &bucket{}
			b.window[idx] = bk
		}
		b.current = bk
	}
	b.expiresAt = r.keep(now)
	var one bucket
	switch {
	case o.Throttled:
		one.throttled = 1
	case o.Failed():
		one.calls, one.failures = 1, 1
		b.consec++
		if o.Stalled {
			b.stalls++
		}
	default:
		one.calls = 1
		if b.consec > 0 {
			b.epoch++
		}
		b.consec, b.stalls = 0, 0
	}
	if !o.Throttled && r.p.IsSlow(o.Duration) {
		one.slow = 1
	}
	bk.plus(one)
	b.summed.added(here, one)
}

// counts sums the live buckets of the window.
func (b *breaker) counts(r *rules, now int64) (calls, failures, slow int) {
	sum := b.live(r, now)
	return sum.calls, sum.failures, sum.slow
}

// throttled sums the throttled requests of the live buckets.
func (b *breaker) throttled(r *rules, now int64) int {
	return b.live(r, now).throttled
}

func percent(pm int) string {
	if pm%10 == 0 {
		return fmt.Sprintf("%d%%", pm/10)
	}
	return fmt.Sprintf("%d.%d%%", pm/10, pm%10)
}

// restart moves the breaker to state in a new generation that no earlier
// outcome or probe carries (rule 4, docs/architecture.md): an empty window, no probe leases, no
// open period. Every transition but open -> half-open and an operator's
// enable goes through it.
func (b *breaker) restart(state coordinator.State, now int64) {
	b.state = state
	b.gen = implement.NextGeneration(b.gen, time.UnixMilli(now))
	b.openFor, b.openUntil, b.pushable = 0, 0, 0
	b.consec, b.stalls, b.successes, b.wouldReject = 0, 0, 0, 0
	b.window, b.leases = nil, nil
	b.swept, b.summed, b.current = place{}, liveSum{}, nil
	b.width, b.buckets = 0, 0
	// The replicas that record stay what they were: the breaker's state
	// does not change them.
	b.replicas, b.epoch = nil, 0
	b.recent = recent{}
	b.recoveredAt = 0
}

// open moves the breaker to open for period ms.
func (b *breaker) open(period, now int64) {
	if b.state == coordinator.StateClosed {
		b.failingSince = now
	}
	b.restart(coordinator.StateOpen, now)
	b.openedAt = now
	b.openFor = period
	b.openUntil = now + period
}

// openByRules opens the breaker for period ms by its rules, from the
// generation it is in, whose calls' pushback may still set the period.
func (b *breaker) openByRules(period, now int64) {
	from := b.gen
	b.open(period, now)
	b.pushable = from
}

// tripped notes why and when the breaker just opened by its rules, and the
// window's counts then.
func (b *breaker) tripped(now int64, reason string, calls, failures, slow int) {
	b.lastTrip = coordinator.Trip{At: time.UnixMilli(now), Reason: reason, Generation: b.gen,
		Calls: calls, Failures: failures, Slow: slow}
}

// reopenFor is the open period after a failed probe, the last period
// being last and the failing having begun at since: OpenFor until
// BackoffAfter has passed, then twice the last, up to MaxOpenFor.
func (r *rules) reopenFor(last, since, now int64) int64 {
	if r.maxOpen == 0 || now-since < r.backoffAfter {
		return r.openFor
	}
	return min(max(last, r.openFor)*2, r.maxOpen)
}

func (b *breaker) close(r *rules, now int64) {
	recovered := b.state != coordinator.StateDisabled
	b.failingSince = 0
	b.restart(coordinator.StateClosed, now)
	if recovered {
		b.recoveredAt = now
	}
	b.note, b.forcedAt = coordinator.Note{}, 0
	// Keep the new generation for a window, so that calls admitted under
	// it can still be recorded.
	b.expiresAt = r.keep(now)
}

func (b *breaker) settle(r *rules, now int64, claim string, o coordinator.Outcome) coordinator.Result {
	if b.state != coordinator.StateHalfOpen || o.Generation != b.gen {
		return b.result(r, now, 1, nil)
	}
	b.pruneLeases(now)
	if _, ok := b.leases[claim]; !ok {
		return b.result(r, now, 1, nil)
	}
	delete(b.leases, claim)
	// A slow probe says the dependency has not recovered.
	if o.Failed() || r.p.IsSlow(o.Duration) {
		b.openByRules(r.reopenFor(b.openFor, b.failingSince, now), now)
		b.tripped(now, "probe failed", 0, 0, 0)
		return b.result(r, now, 0, b.transition(coordinator.StateHalfOpen, now, "probe failed"))
	}
	b.successes++
	if b.successes < r.successes {
		return b.result(r, now, 0, nil)
	}
	n := b.successes
	b.close(r, now)
	return b.result(r, now, 0, b.transition(coordinator.StateHalfOpen, now, fmt.Sprintf("probes succeeded %d/%d", n, r.successes)))
}

// snapshot reads b as of now; a nil breaker is a scope not born. A breaker
// past keeping, or isolated for a time that has passed, reads as not born
// either: the next operation that writes gives it a new generation.
func (b *breaker) snapshot(r *rules, scope string, now int64) coordinator.Snapshot {
	if b == nil || b.expired(now) || b.isolationOver(now) {
		return coordinator.Snapshot{Scope: scope}
	}
	s := coordinator.Snapshot{
		Scope:               scope,
		State:               b.stateAt(now),
		Generation:          b.gen,
		ConsecutiveFailures: b.consec,
		ProbeSuccesses:      b.successes,
	}
	s.Calls, s.Failures, s.Slow = b.counts(r, now)
	s.Throttled = b.throttled(r, now)
	s.WouldReject = b.wouldReject
	width, buckets := b.layout(r)
	s.Policies = b.carriedPolicies(now - width*buckets)
	if b.openedAt != 0 {
		s.OpenedAt = time.UnixMilli(b.openedAt)
	}
	if b.openUntil != 0 {
		s.OpenUntil = time.UnixMilli(b.openUntil)
	}
	if b.forcedAt != 0 {
		s.Operator, s.ForcedAt = b.note, time.UnixMilli(b.forcedAt)
	}
	s.LastTrip = b.lastTrip
	s.Outliers = b.outliers(r, now)
	for _, deadline := range b.leases {
		if deadline > now {
			s.ProbesInFlight++
		}
	}
	return s
}
