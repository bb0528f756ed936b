package redis

import (
	"context"

	"github.com/cbgrpc/cbgrpc/coordinator"
)

var _ coordinator.Controller = (*Coordinator)(nil)

// Isolate implements [coordinator.Controller]. The isolated state and the
// operator's note are kept in the scope's state hash, which never expires
// while isolated.
func (c *Coordinator) Isolate(ctx context.Context, scope string, p coordinator.Policy, n coordinator.Note) (coordinator.Result, error) {
	return c.control(ctx, "isolate", scope, p, n)
}

// Release implements [coordinator.Controller].
func (c *Coordinator) Release(ctx context.Context, scope string, p coordinator.Policy, n coordinator.Note) (coordinator.Result, error) {
	return c.control(ctx, "release", scope, p, n)
}

// Disable implements [coordinator.Controller]. The disabled state never
// expires; its window keeps counting outcomes.
func (c *Coordinator) Disable(ctx context.Context, scope string, p coordinator.Policy, n coordinator.Note) (coordinator.Result, error) {
	return c.control(ctx, "disable", scope, p, n)
}

// Enable implements [coordinator.Controller].
func (c *Coordinator) Enable(ctx context.Context, scope string, p coordinator.Policy, n coordinator.Note) (coordinator.Result, error) {
	return c.control(ctx, "enable", scope, p, n)
}

// control runs control.lua: one script for the four commands, since they
// share every step but the state they set.
func (c *Coordinator) control(ctx context.Context, op, scope string, p coordinator.Policy, n coordinator.Note) (coordinator.Result, error) {
	if err := n.Validate(op); err != nil {
		return coordinator.Result{}, opError(op, scope, err)
	}
	return c.result(ctx, c.scripts.control, op, scope, p, op, n.By, n.Reason, n.For.Milliseconds(), n.Describe(op))
}
