package memory

import (
	"context"
	"fmt"

	"github.com/cbgrpc/cbgrpc/coordinator"
	"github.com/cbgrpc/cbgrpc/coordinator/implement"
)

var _ coordinator.Pusher = (*Coordinator)(nil)

// Push implements [coordinator.Pusher].
func (c *Coordinator) Push(ctx context.Context, q coordinator.PushRequest) (coordinator.Result, error) {
	if err := implement.CheckPushReason(q.Reason); err != nil {
		return coordinator.Result{}, fmt.Errorf("memory coordinator: push %q: %w", q.Scope, err)
	}
	var res coordinator.Result
	err := c.op(ctx, "push", q.Scope, q.Policy, implement.Seen(q.Seen, coordinator.Outcome{Generation: q.Generation}), func(b *breaker, r *rules, now int64) *coordinator.Transition {
		res = b.push(r, now, q.Generation, implement.PushPeriod(q.Policy, q.Period).Milliseconds(), q.Reason)
		res.PolicyVersion = c.policyVersion(q.Scope)
		return res.Transition
	})
	return res, err
}

// push opens the breaker for period ms if it is closed or half-open in
// generation gen, or, if the rules opened it from gen and no push has
// set its period yet, sets the period to end period ms from now.
func (b *breaker) push(r *rules, now int64, gen uint64, period int64, reason string) coordinator.Result {
	from := b.state
	if from == coordinator.StateOpen && gen != 0 && b.pushable == gen {
		// The outcome of a call of gen landed first: the server's time
		// wins, with no second transition.
		b.openFor, b.openUntil, b.pushable = period, now+period, 0
		return b.result(r, now, 0, nil)
	}
	if b.gen != gen || (from != coordinator.StateClosed && from != coordinator.StateHalfOpen) {
		return b.result(r, now, 1, nil)
	}
	var calls, failures, slow int
	if from == coordinator.StateClosed {
		calls, failures, slow = b.counts(r, now)
	}
	b.open(period, now)
	b.tripped(now, reason, calls, failures, slow)
	return b.result(r, now, 0, b.transition(from, now, reason))
}
