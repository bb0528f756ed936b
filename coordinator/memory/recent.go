package memory

import (
	"fmt"

	"github.com/cbgrpc/cbgrpc/coordinator"
)

// recent is the fleet's recent evidence (the recent rule,
// docs/architecture.md): the calls counted since failures or slow calls
// last began to outrun what the policy's ratios allow, an excursion of a
// CUSUM. number counts excursions, so that a replica's share of an ended
// one reads as none; since is when the current one began (ms).
type recent struct {
	failures, slow, calls int
	stalled               int // of the failures (Outcome.Stalled)
	since, number         int64
}

// pace is the fleet's call rate, read from the bucket before the current
// one as a Record finds it: calls per width ms. A replica that holds its
// successes while another sends its failures at once makes the recent
// outcomes look worse than they are; the excursion counts at least the
// calls this rate says the fleet made since it began.
type pace struct{ calls, per int64 }

// paceOf reads the window's pace at now in r's layout; none (per 0) until
// the bucket before the current one is whole (the one before it has
// calls: the window began before it) and holds MinCalls calls. Until then
// (a young fleet, a fresh generation, a quiet scope) the recent rule
// waits, and the window's rules judge.
func (b *breaker) paceOf(r *rules, now int64) pace {
	idx := now / r.width
	last, before := b.window[idx-1], b.window[idx-2]
	if r.buckets < 3 || last == nil || before == nil || before.calls == 0 || last.calls < r.calls {
		return pace{}
	}
	return pace{calls: int64(last.calls), per: r.width}
}

// expected is how many calls the fleet made in the d ms since an
// excursion began, by its pace.
func (p pace) expected(d int64) int {
	if p.per == 0 || d <= 0 {
		return 0
	}
	return int(p.calls * d / p.per)
}

// excess is what n of calls make beyond pm thousandths of them, in
// thousandths of a call.
func excess(n, calls, pm int) int { return 1000*n - pm*calls }

// over is the excursion's calls at now: those counted, or the fleet's
// pace's if more; none while it holds none.
func (x *recent) over(p pace, now int64) int {
	if x.calls == 0 {
		return 0
	}
	return max(x.calls, p.expected(now-x.since))
}

// spent reports whether the excursion holds calls and no enabled ratio's
// excess any more, or began a window ago: the next call starts afresh.
func (x *recent) spent(r *rules, p pace, now int64) bool {
	if x.calls == 0 {
		return false
	}
	if now-x.since >= r.width*r.buckets {
		return true
	}
	calls := x.over(p, now)
	return (r.failPm == 0 || excess(x.failures, calls, r.failPm) <= 0) && (r.slowPm == 0 || excess(x.slow, calls, r.slowPm) <= 0)
}

// count adds the call of o to the excursion, after ending a spent one: a
// failure or slow call starts one, a success counts only in one. It
// reports whether the call counted.
func (x *recent) count(r *rules, p pace, now int64, o coordinator.Outcome, slow bool) bool {
	failure := o.Failed()
	if r.failPm == 0 && r.slowPm == 0 {
		return false
	}
	if x.spent(r, p, now) {
		*x = recent{number: x.number + 1}
	}
	if x.calls == 0 {
		if !failure && !slow {
			return false
		}
		x.since = now
	}
	x.calls++
	if failure {
		x.failures++
	}
	if o.Stalled {
		x.stalled++
	}
	if slow {
		x.slow++
	}
	return true
}

// share is what a replica contributed to the excursion number: calls,
// failures and slow calls.
type share struct {
	calls, failures, slow int
	number                int64
}

// joined reports whether t has failed (or been slow) in the excursion
// number, so that its successes count in it. A replica sends the successes
// it held with its next failure: those from before it saw the excursion's
// trouble count in none, and the fleet's pace stands for them.
func (t *tracked) joined(number int64) bool {
	return t != nil && t.recent.number == number && t.recent.calls > 0
}

// of is s as of excursion number: nothing once that one ended.
func (s share) of(number int64) share {
	if s.number != number {
		return share{number: number}
	}
	return s
}

// recentReason says whether the recent rule on n (failures or slow calls,
// as name says) of the excursion's calls holds for the fleet, judged
// without the replicas leftOut says; "" when it does not. It is judged
// when a failure or slow call counts: nothing else raises it. Until the
// window holds MinCalls calls before its current bucket (a young fleet, a
// fresh generation) the fleet's pace is unknown, and failures sent at once
// while other replicas hold their successes would look like a brownout:
// the window's own rules judge meanwhile.
func (b *breaker) recentReason(r *rules, p pace, now int64, name string, pm int, pick func(failures, slow int) int) string {
	if pm == 0 || b.recent.calls == 0 || p.per == 0 {
		return ""
	}
	calls, n := b.recent.over(p, now), pick(b.recent.failures, b.recent.slow)
	out := b.leftOutBy(r, now, func(t *tracked) int {
		s := t.recent.of(b.recent.number)
		return excess(pick(s.failures, s.slow), s.calls, pm)
	})
	for _, t := range out {
		s := t.recent.of(b.recent.number)
		calls, n = calls-s.calls, n-pick(s.failures, s.slow)
	}
	over := excess(n, calls, pm)
	if over < 1000*r.calls {
		return ""
	}
	reason := fmt.Sprintf("recent %s %d/%d, %d over %s", name, n, calls, over/1000, percent(pm))
	if name == "failures" {
		reason += stalledOf(b.recent.stalled, n)
	}
	return reason + leavingOut(out)
}

// recentTrip is the recent rule's reason after o counted; "" if it holds
// for neither failures nor slow calls.
func (b *breaker) recentTrip(r *rules, p pace, now int64, o coordinator.Outcome) string {
	if o.Failed() {
		if reason := b.recentReason(r, p, now, "failures", r.failPm, func(f, _ int) int { return f }); reason != "" {
			return reason
		}
	}
	if r.p.IsSlow(o.Duration) {
		return b.recentReason(r, p, now, "slow calls", r.slowPm, func(_, s int) int { return s })
	}
	return ""
}

// stalledOf is what a trip's reason says of the stalled calls among the
// n failures it counted: stalls of them, at most n (the replicas a rule
// leaves out take their failures with them, and maybe stalls); nothing
// when there are none.
func stalledOf(stalls, n int) string {
	if stalls <= 0 {
		return ""
	}
	return fmt.Sprintf(", %d stalled", min(stalls, n))
}
