package memory

import (
	"context"
	"fmt"
	"time"

	"github.com/cbgrpc/cbgrpc/coordinator"
)

var _ coordinator.CauseKeeper = (*Coordinator)(nil)

// KeepCause implements [coordinator.CauseKeeper].
func (c *Coordinator) KeepCause(ctx context.Context, q coordinator.CauseRequest) (bool, error) {
	if err := coordinator.CheckCause(q.Cause); err != nil {
		return false, fmt.Errorf("memory coordinator: keep cause %q: %w", q.Scope, err)
	}
	if err := ctx.Err(); err != nil {
		return false, fmt.Errorf("memory coordinator: keep cause %q: %w", q.Scope, err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	b := c.scopes[q.Scope]
	if b == nil || b.moved == nil || b.cause != "" ||
		b.gen != q.Generation || b.state != q.State || b.moved.Generation != q.Generation || b.moved.To != q.State {
		return false, nil
	}
	b.cause = q.Cause
	t := *b.moved
	t.Cause = q.Cause
	c.publish(&t)
	return true, nil
}

// causeOf is the cause an answer carries that reports state s with ramp
// left: the kept one, while s is neither closed nor disabled or a ramp is
// left, unless the operation moved the breaker (own, or the lapse it began
// with): the kept cause is then of the state it left.
func (b *breaker) causeOf(s coordinator.State, ramp time.Duration, own *coordinator.Transition) string {
	if own != nil && own.Replica == "" || (s == coordinator.StateClosed || s == coordinator.StateDisabled) && ramp == 0 {
		return ""
	}
	return b.cause
}
