package memory

import (
	"context"
	"fmt"
	"time"

	"github.com/cbgrpc/cbgrpc/coordinator"
	"github.com/cbgrpc/cbgrpc/coordinator/implement"
)

// overrides are the shared policy's layers: the fleet default and each
// scope's override. A scope's layer stays after a reset, with no fields,
// so that its version keeps growing; it is never forgotten, as a Redis
// coordinator's is not, and costs one map entry per scope ever overridden.
type overrides struct {
	fleet  coordinator.PolicyLayer
	scopes map[string]coordinator.PolicyLayer
}

// SetOverride implements [coordinator.Controller].
func (c *Coordinator) SetOverride(ctx context.Context, t coordinator.Target, o coordinator.Override, n coordinator.Note) (coordinator.Overrides, error) {
	return c.changeOverride(ctx, "set override", t, func(cur coordinator.Override) coordinator.Override { return cur.Merge(o) }, n)
}

// ResetOverride implements [coordinator.Controller].
func (c *Coordinator) ResetOverride(ctx context.Context, t coordinator.Target, n coordinator.Note) (coordinator.Overrides, error) {
	return c.changeOverride(ctx, "reset override", t, func(coordinator.Override) coordinator.Override { return nil }, n)
}

// changeOverride stores what change makes of t's override, once checked,
// and publishes it; a change that leaves an override with no field where
// there was none changes nothing.
func (c *Coordinator) changeOverride(ctx context.Context, op string, t coordinator.Target, change func(coordinator.Override) coordinator.Override, n coordinator.Note) (coordinator.Overrides, error) {
	if err := ctx.Err(); err != nil {
		return coordinator.Overrides{}, fmt.Errorf("memory coordinator: %s of %v: %w", op, t, err)
	}
	if err := n.Validate("override"); err != nil {
		return coordinator.Overrides{}, fmt.Errorf("memory coordinator: %s of %v: %w", op, t, err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	now := time.UnixMilli(c.clock().UnixMilli())
	cur := c.layer(t)
	next := change(cur.Override)
	if err := implement.CheckOverride(t, next, c.policies.fleet.Override); err != nil {
		return coordinator.Overrides{}, fmt.Errorf("memory coordinator: %s of %v: %w", op, t, err)
	}
	if len(next) == 0 && len(cur.Override) == 0 {
		return c.overridesOf(t), nil
	}
	if len(next) == 0 {
		next = nil
	}
	l := coordinator.PolicyLayer{Override: next, Version: implement.NextGeneration(cur.Version, now), By: n.By, Reason: n.Reason, At: now}
	if t.Fleet {
		c.policies.fleet = l
	} else {
		if c.policies.scopes == nil {
			c.policies.scopes = make(map[string]coordinator.PolicyLayer)
		}
		c.policies.scopes[t.Scope] = l
	}
	c.publishPolicy(coordinator.PolicyChange{Target: t, Version: l.Version})
	return c.overridesOf(t), nil
}

// layer is t's stored layer. c.mu is held.
func (c *Coordinator) layer(t coordinator.Target) coordinator.PolicyLayer {
	if t.Fleet {
		return c.policies.fleet
	}
	return c.policies.scopes[t.Scope]
}

// overridesOf is what Overrides and SetOverride of t return. c.mu is
// held.
func (c *Coordinator) overridesOf(t coordinator.Target) coordinator.Overrides {
	if t.Fleet {
		return coordinator.Overrides{Fleet: c.policies.fleet}
	}
	return coordinator.Overrides{Fleet: c.policies.fleet, Scope: c.policies.scopes[t.Scope]}
}

// policyVersion is the version answers carry. c.mu is held.
func (c *Coordinator) policyVersion(scope string) uint64 {
	return c.policies.scopes[scope].Version
}

// Overrides implements [coordinator.Controller].
func (c *Coordinator) Overrides(ctx context.Context, t coordinator.Target) (coordinator.Overrides, error) {
	if err := ctx.Err(); err != nil {
		return coordinator.Overrides{}, fmt.Errorf("memory coordinator: overrides of %v: %w", t, err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.overridesOf(t), nil
}
