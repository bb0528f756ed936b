package memory

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/cbgrpc/cbgrpc/coordinator"
	"github.com/cbgrpc/cbgrpc/coordinator/implement"
)

// What a breaker knows of the replicas that record in its closed
// generation (Policy.Outliers): the ones that failed, each with its own
// window, run and spell as an outlier, at most
// implement.TrackedReplicas of them; and the replicas that recorded
// lately, as many as it takes to tell whether those it leaves out are all
// of them. Both start afresh with every generation.

// tracked is one replica that failed or was slow in the generation.
type tracked struct {
	id string
	// window holds its own outcomes since it was first tracked (or since
	// its spell as an outlier ended), in the layout of the breaker's.
	window map[int64]*bucket
	own    int // its own run of failures
	// run is what it contributed to the fleet's run of failures number
	// epoch (breaker.epoch).
	run   int
	epoch int64
	// recent is what it contributed to the fleet's recent excursion.
	recent share
	// until, when not 0, makes it an outlier whose period ends then;
	// period is that period, since when its spell began, reason the rule
	// that made it one or "probe failed".
	until, period, since int64
	reason               string
}

// reporter is a replica whose last Record was in the bucket that starts
// at at (ms).
type reporter struct {
	id string
	at int64
}

// liveFrom is the first bucket index live at now in the window's layout.
func (b *breaker) liveFrom(r *rules, now int64) (from, width int64) {
	width, buckets := b.layout(r)
	return now/width - buckets + 1, width
}

// counts sums t's live buckets.
func (t *tracked) counts(from int64) (calls, failures, slow int) {
	for i, bk := range t.window {
		if i >= from {
			calls, failures, slow = calls+bk.calls, failures+bk.failures, slow+bk.slow
		}
	}
	return calls, failures, slow
}

// dead reports whether t is worth nothing any more: an outlier a window
// past its period (the replica is gone), or a replica with no live bucket.
func (b *breaker) dead(t *tracked, r *rules, now int64) bool {
	from, width := b.liveFrom(r, now)
	if t.until != 0 {
		_, buckets := b.layout(r)
		return now >= t.until+width*buckets
	}
	for i := range t.window {
		if i >= from {
			return false
		}
	}
	return true
}

// replica returns what the breaker tracks of id; nil if nothing. A dead
// entry is dropped on the way.
func (b *breaker) replica(id string, r *rules, now int64) *tracked {
	t := b.replicas[id]
	if t != nil && b.dead(t, r, now) {
		delete(b.replicas, id)
		return nil
	}
	return t
}

// dropDead forgets the replicas that are worth nothing any more.
func (b *breaker) dropDead(r *rules, now int64) {
	for id, t := range b.replicas {
		if b.dead(t, r, now) {
			delete(b.replicas, id)
		}
	}
}

// track returns the entry of id, making one if there is none. When the
// table is full, dead entries go first, then the replica with the fewest
// failures and slow calls that is no outlier (ties: the lowest ID).
func (b *breaker) track(id string, r *rules, now int64) *tracked {
	if t := b.replica(id, r, now); t != nil {
		return t
	}
	if len(b.replicas) >= implement.TrackedReplicas {
		b.dropDead(r, now)
	}
	if len(b.replicas) >= implement.TrackedReplicas {
		from, _ := b.liveFrom(r, now)
		victim := slices.MinFunc(slices.Collect(mapValues(b.replicas)), func(x, y *tracked) int {
			return cmp.Or(cmp.Compare(btoi(x.until != 0), btoi(y.until != 0)), cmp.Compare(bad(x, from), bad(y, from)), cmp.Compare(x.id, y.id))
		})
		delete(b.replicas, victim.id)
	}
	if b.replicas == nil {
		b.replicas = make(map[string]*tracked)
	}
	t := &tracked{id: id, window: make(map[int64]*bucket, 1)}
	b.replicas[id] = t
	return t
}

func bad(t *tracked, from int64) int {
	_, failures, slow := t.counts(from)
	return failures + slow
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

func mapValues[K comparable, V any](m map[K]V) func(func(V) bool) {
	return func(yield func(V) bool) {
		for _, v := range m {
			if !yield(v) {
				return
			}
		}
	}
}

// heard notes that id recorded at now. The breaker keeps 2 × Outliers + 1
// of the replicas that recorded last, each with the start of the bucket
// of its last Record: when those it leaves out of a rule are all the
// replicas it heard within the window, the rule holds as it is. An entry
// is replaced only by a Record of a later bucket, so a fleet's steady
// Records rewrite it a few times a bucket, not at every Record.
func (b *breaker) heard(id string, r *rules, now int64) {
	_, width := b.liveFrom(r, now)
	capacity := 2*r.p.Outliers + 1
	start := now / width * width
	for i := range b.reporters {
		if b.reporters[i].id == id {
			if b.reporters[i].at/width != now/width {
				b.reporters[i].at = start
			}
			return
		}
	}
	switch oldest := b.oldestReporter(); {
	case len(b.reporters) < capacity:
		b.reporters = append(b.reporters, reporter{id: id, at: start})
	case b.reporters[oldest].at/width < now/width:
		b.reporters[oldest] = reporter{id: id, at: start}
	}
	for len(b.reporters) > capacity {
		b.reporters = slices.Delete(b.reporters, b.oldestReporter(), b.oldestReporter()+1)
	}
}

// oldestReporter is the index of the first reporter with the earliest
// time; -1 when there is none.
func (b *breaker) oldestReporter() int {
	oldest := -1
	for i, rp := range b.reporters {
		if oldest < 0 || rp.at < b.reporters[oldest].at {
			oldest = i
		}
	}
	return oldest
}

// forgetReporter drops id from the reporters: an outlier's Records are no
// fleet's.
func (b *breaker) forgetReporter(id string) {
	b.reporters = slices.DeleteFunc(b.reporters, func(rp reporter) bool { return rp.id == id })
}

// attribute adds o, an outcome of replica id just added to the fleet's
// window (and to its recent excursion, if recently), to id's own entry: a
// failure or a slow call makes one if there is none. It returns the
// entry, nil if there is none.
func (b *breaker) attribute(t *tracked, id string, r *rules, now int64, o coordinator.Outcome, recently bool) *tracked {
	slow := r.p.IsSlow(o.Duration)
	if t == nil && (o.Failed() || slow) {
		t = b.track(id, r, now)
	}
	if t == nil {
		return nil
	}
	width, buckets := b.layout(r)
	idx := now / width
	for i := range t.window {
		if i <= idx-buckets {
			delete(t.window, i)
		}
	}
	bk := t.window[idx]
	if bk == nil {
		bk = &bucket{}
		t.window[idx] = bk
	}
	bk.calls++
	if o.Failed() {
		bk.failures++
		t.own++
		if t.epoch != b.epoch {
			t.epoch, t.run = b.epoch, 0
		}
		t.run++
	} else {
		t.own = 0
	}
	if slow {
		bk.slow++
	}
	if recently {
		t.recent = t.recent.of(b.recent.number)
		t.recent.calls++
		if o.Failed() {
			t.recent.failures++
		}
		if slow {
			t.recent.slow++
		}
	}
	return t
}

// leftOut returns the replicas a rule is judged without: the Outliers
// that contribute most to it by measure (ties: the lowest ID), unless
// those are all the replicas heard within the window. Outliers are no
// candidates: their outcomes have left the fleet's window already, and a
// replica found one (or one that restarted under a new ID) leaves the
// budget whole.
func (b *breaker) leftOut(r *rules, now int64, measure func(*tracked) int) []*tracked {
	cands := b.worst(r, now, r.p.Outliers, nil, measure)
	if len(cands) == 0 {
		return nil
	}
	from, width := b.liveFrom(r, now)
	for _, rp := range b.reporters {
		if rp.at/width >= from && !slices.ContainsFunc(cands, func(t *tracked) bool { return t.id == rp.id }) {
			return cands
		}
	}
	return nil
}

// tripReason says which rule holds for the fleet after o counted, checked
// in the order consecutive failures, failure ratio, slow-call ratio,
// recent failures, recent slow calls; "" when none does. With
// Policy.Outliers a rule holds only if it holds as well without the
// replicas leftOut says, and the reason gives the counts without them.
func (b *breaker) tripReason(r *rules, p pace, now int64, o coordinator.Outcome) string {
	calls, failures, slow := b.counts(r, now)
	if r.consecutive > 0 && b.consec >= r.consecutive {
		run := b.consec
		out := b.leftOutBy(r, now, func(t *tracked) int {
			if t.epoch == b.epoch {
				return t.run
			}
			return 0
		})
		for _, t := range out {
			run -= t.run
		}
		if run >= r.consecutive {
			return fmt.Sprintf("consecutive failures %d >= %d", run, r.consecutive) + stalledOf(b.stalls, run) + leavingOut(out)
		}
	}
	if calls >= r.calls {
		if reason := b.ratioReason(r, now, "failures", r.failPm, failures, calls, func(_, f, _ int) int { return f }); reason != "" {
			return reason
		}
		if reason := b.ratioReason(r, now, "slow calls", r.slowPm, slow, calls, func(_, _, s int) int { return s }); reason != "" {
			return reason
		}
	}
	return b.recentTrip(r, p, now, o)
}

// ratioReason says whether the ratio rule of pm thousandths, which counts
// n of calls on the fleet's window, holds for the fleet; of picks what it
// counts from a replica's calls, failures and slow calls.
func (b *breaker) ratioReason(r *rules, now int64, name string, pm, n, calls int, of func(calls, failures, slow int) int) string {
	// integer math: 0.5 must trip at exactly 2 of 4
	if pm == 0 || n*1000 < pm*calls {
		return ""
	}
	from, _ := b.liveFrom(r, now)
	out := b.leftOutBy(r, now, func(t *tracked) int { return of(t.counts(from)) })
	for _, t := range out {
		c, f, s := t.counts(from)
		calls, n = calls-c, n-of(c, f, s)
	}
	if calls < r.calls || n*1000 < pm*calls {
		return ""
	}
	return fmt.Sprintf("%s %d/%d >= %s", name, n, calls, percent(pm)) + leavingOut(out)
}

// worst returns the n replicas but except that contribute most by
// measure (ties: the lowest ID), outliers and replicas that contribute
// nothing aside.
func (b *breaker) worst(r *rules, now int64, n int, except *tracked, measure func(*tracked) int) []*tracked {
	var cands []*tracked
	for _, t := range b.replicas {
		if t != except && t.until == 0 && !b.dead(t, r, now) && measure(t) > 0 {
			cands = append(cands, t)
		}
	}
	slices.SortFunc(cands, func(x, y *tracked) int { return cmp.Or(cmp.Compare(measure(y), measure(x)), cmp.Compare(x.id, y.id)) })
	return cands[:min(max(n, 0), len(cands))]
}

// leftOutBy is leftOut when the policy attributes outcomes at all.
func (b *breaker) leftOutBy(r *rules, now int64, measure func(*tracked) int) []*tracked {
	if r.p.Outliers == 0 {
		return nil
	}
	return b.leftOut(r, now, measure)
}

func leavingOut(out []*tracked) string {
	switch len(out) {
	case 0:
		return ""
	case 1:
		return ", leaving out 1 replica"
	}
	return fmt.Sprintf(", leaving out %d replicas", len(out))
}

// ownReason says which rule t's own outcomes trip while t fails (or is
// slow) markedly more than the rest of the fleet; "" when none does, or
// when no other replica was heard within the window: a replica alone is
// its own fleet.
func (b *breaker) ownReason(t *tracked, r *rules, p pace, now int64) string {
	from, width := b.liveFrom(r, now)
	if !slices.ContainsFunc(b.reporters, func(rp reporter) bool { return rp.id != t.id && rp.at/width >= from }) {
		return ""
	}
	failed := func(f, _ int) int { return f }
	slowed := func(_, s int) int { return s }
	if r.consecutive > 0 && t.own >= r.consecutive && b.worse(t, r, p, now, failed) {
		return fmt.Sprintf("consecutive failures %d >= %d", t.own, r.consecutive)
	}
	calls, failures, slow := t.counts(from)
	if calls < r.calls {
		return ""
	}
	if r.failPm > 0 && failures*1000 >= r.failPm*calls && b.worse(t, r, p, now, failed) {
		return fmt.Sprintf("failures %d/%d >= %s", failures, calls, percent(r.failPm))
	}
	if r.slowPm > 0 && slow*1000 >= r.slowPm*calls && b.worse(t, r, p, now, slowed) {
		return fmt.Sprintf("slow calls %d/%d >= %s", slow, calls, percent(r.slowPm))
	}
	return ""
}

// worse reports whether t fails (or is slow, as pick says) markedly more
// than the rest of the fleet: implement.Markedly times their share or
// more, over the recent excursion when the rest made MinCalls calls in it
// (the same stretch of time for both), else over the window. The rest
// leaves out the Outliers − 1 other replicas that contribute most, as a
// trip would: with Outliers 2, two replicas failing alone are both
// outliers.
func (b *breaker) worse(t *tracked, r *rules, p pace, now int64, pick func(failures, slow int) int) bool {
	recent := func(o *tracked) (calls, n int) {
		s := o.recent.of(b.recent.number)
		return s.calls, pick(s.failures, s.slow)
	}
	from, _ := b.liveFrom(r, now)
	window := func(o *tracked) (calls, n int) {
		c, f, sl := o.counts(from)
		return c, pick(f, sl)
	}
	shares := func(of func(*tracked) (int, int), calls, n int) (mine, myCalls, rest, restCalls int) {
		myCalls, mine = of(t)
		restCalls, rest = calls-myCalls, n-mine
		for _, o := range b.worst(r, now, r.p.Outliers-1, t, func(o *tracked) int { _, n := of(o); return n }) {
			c, k := of(o)
			restCalls, rest = restCalls-c, rest-k
		}
		return mine, myCalls, rest, restCalls
	}
	mine, calls, rest, restCalls := shares(recent, b.recent.over(p, now), pick(b.recent.failures, b.recent.slow))
	if calls == 0 || restCalls < r.calls {
		all, af, asl := b.counts(r, now)
		mine, calls, rest, restCalls = shares(window, all, pick(af, asl))
	}
	return mine*restCalls >= implement.Markedly*rest*calls
}

// isolate makes t an outlier for reason: its outcomes leave the fleet's
// window and run, and it leaves the reporters, for an open period.
func (b *breaker) isolate(t *tracked, r *rules, now int64, reason string) *coordinator.Transition {
	t.period, t.until, t.since, t.reason = r.openFor, now+r.openFor, now, reason
	for i, own := range t.window {
		if bk := b.window[i]; bk != nil {
			bk.calls = max(0, bk.calls-own.calls)
			bk.failures = max(0, bk.failures-own.failures)
			bk.slow = max(0, bk.slow-own.slow)
		}
	}
	b.summed.forget()
	if t.epoch == b.epoch {
		b.consec = max(0, b.consec-t.run)
	}
	t.run = 0
	if s := t.recent.of(b.recent.number); s.calls > 0 {
		b.recent.calls -= s.calls
		b.recent.failures -= s.failures
		b.recent.slow -= s.slow
	}
	t.recent = share{}
	b.forgetReporter(t.id)
	b.makeRoom(t, r, now)
	return b.replicaTransition(t, coordinator.StateClosed, coordinator.StateOpen, now, reason)
}

// makeRoom keeps the outliers to Policy.Outliers now that t is one: the
// spells that began first end (ties: the lowest ID). An outlier is silent
// while its period lasts, so the coordinator cannot tell one whose
// replica is gone (restarted under a new ID) from one that waits: the
// newest evidence wins. The replica whose spell ended learns it with its
// probe, which counts as any outcome.
func (b *breaker) makeRoom(t *tracked, r *rules, now int64) {
	var spells []*tracked
	for _, o := range b.replicas {
		if o != t && o.until != 0 && !b.dead(o, r, now) {
			spells = append(spells, o)
		}
	}
	slices.SortFunc(spells, func(x, y *tracked) int { return cmp.Or(cmp.Compare(x.since, y.since), cmp.Compare(x.id, y.id)) })
	for _, o := range spells[:max(0, len(spells)-r.p.Outliers+1)] {
		delete(b.replicas, o.id)
	}
}

// reisolate starts another period of the outlier t, whose probe failed,
// as the fleet's breaker reopens (rules.reopenFor), its spell having
// begun at since.
func (b *breaker) reisolate(t *tracked, r *rules, now int64) *coordinator.Transition {
	period := r.reopenFor(t.period, t.since, now)
	t.period, t.until, t.reason = period, now+period, "probe failed"
	return b.replicaTransition(t, coordinator.StateHalfOpen, coordinator.StateOpen, now, t.reason)
}

// forgive ends the spell of the outlier t, whose probe succeeded: it is a
// replica like any other again, tracked afresh.
func (b *breaker) forgive(t *tracked, now int64) *coordinator.Transition {
	delete(b.replicas, t.id)
	tr := b.replicaTransition(t, coordinator.StateHalfOpen, coordinator.StateClosed, now, "probe succeeded")
	tr.OpenUntil = timeOf(0)
	return tr
}

func (b *breaker) replicaTransition(t *tracked, from, to coordinator.State, now int64, reason string) *coordinator.Transition {
	return &coordinator.Transition{Scope: b.scope, From: from, To: to, Generation: b.gen, At: timeOf(now),
		Reason: reason, Replica: t.id, OpenUntil: timeOf(t.until)}
}

// outlier describes t as an outlier as of now; nil if it is none.
func (t *tracked) outlier(now int64) *coordinator.Outlier {
	if t == nil || t.until == 0 {
		return nil
	}
	return &coordinator.Outlier{Replica: t.id, Since: timeOf(t.since), Until: timeOf(t.until),
		RetryAfter: ms(max(0, t.until-now)), Reason: t.reason}
}

// outliers lists the breaker's outliers as of now, by replica.
func (b *breaker) outliers(r *rules, now int64) []coordinator.Outlier {
	var out []coordinator.Outlier
	for _, t := range b.replicas {
		if o := t.outlier(now); o != nil && !b.dead(t, r, now) {
			out = append(out, *o)
		}
	}
	slices.SortFunc(out, func(x, y coordinator.Outlier) int { return cmp.Compare(x.Replica, y.Replica) })
	return out
}
