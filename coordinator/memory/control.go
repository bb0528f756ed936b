package memory

import (
	"context"
	"fmt"

	"github.com/cbgrpc/cbgrpc/coordinator"
	"github.com/cbgrpc/cbgrpc/coordinator/implement"
)

var _ coordinator.Controller = (*Coordinator)(nil)

// Isolate implements [coordinator.Controller].
func (c *Coordinator) Isolate(ctx context.Context, q coordinator.CommandRequest) (coordinator.Result, error) {
	return c.control(ctx, "isolate", q)
}

// Release implements [coordinator.Controller].
func (c *Coordinator) Release(ctx context.Context, q coordinator.CommandRequest) (coordinator.Result, error) {
	return c.control(ctx, "release", q)
}

// Disable implements [coordinator.Controller].
func (c *Coordinator) Disable(ctx context.Context, q coordinator.CommandRequest) (coordinator.Result, error) {
	return c.control(ctx, "disable", q)
}

// Enable implements [coordinator.Controller].
func (c *Coordinator) Enable(ctx context.Context, q coordinator.CommandRequest) (coordinator.Result, error) {
	return c.control(ctx, "enable", q)
}

func (c *Coordinator) control(ctx context.Context, op string, q coordinator.CommandRequest) (coordinator.Result, error) {
	if err := q.Note.Validate(op); err != nil {
		return coordinator.Result{}, fmt.Errorf("memory coordinator: %s %q: %w", op, q.Scope, err)
	}
	var res coordinator.Result
	err := c.op(ctx, op, q.Scope, q.Policy, implement.Seen(q.Seen), func(b *breaker, r *rules, now int64) *coordinator.Transition {
		t := b.control(r, now, op, q.Note)
		res = b.result(r, now, 0, t)
		res.PolicyVersion = c.policyVersion(q.Scope)
		return t
	})
	return res, err
}

// control applies one operator command and returns the transition it made,
// if any.
func (b *breaker) control(r *rules, now int64, op string, n coordinator.Note) *coordinator.Transition {
	from, end := b.state, b.openUntil
	switch op {
	case "isolate":
		if from != coordinator.StateIsolated {
			b.restart(coordinator.StateIsolated, now)
			b.openedAt = now
		}
		b.openUntil = 0
		if n.For > 0 {
			b.openUntil = now + n.For.Milliseconds()
		}
		b.note, b.forcedAt = n, now
	case "release":
		if from != coordinator.StateClosed {
			b.close(r, now)
		}
	case "disable":
		if from != coordinator.StateDisabled {
			b.restart(coordinator.StateDisabled, now)
		}
		b.note, b.forcedAt = n, now
	case "enable":
		if from == coordinator.StateDisabled {
			b.state = coordinator.StateClosed
			b.note, b.forcedAt = coordinator.Note{}, 0
			// Kept for a window from now, as after a recovery: past every
			// bucket counted while disabled.
			b.expiresAt = r.keep(now)
		}
	}
	// Isolating again with another end is a transition of its own, in the
	// same generation, so that every replica hears the new end.
	if b.state == from && !(op == "isolate" && b.openUntil != end) {
		return nil
	}
	return b.transition(from, now, implement.Describe(n, op))
}
