package memory

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/cbgrpc/cbgrpc/coordinator"
)

var _ coordinator.Lister = (*Coordinator)(nil)

// List returns a snapshot, as of now, of every scope the coordinator
// holds state for, sorted by scope; scopes that are not born (forgotten, or
// never used) are left out. p gives the window the
// counts are read over. It costs O(scopes) under the coordinator's lock.
// Its state is Go values, never junk: no scope is listed as corrupt
// (Snapshot.Corrupt).
func (c *Coordinator) List(ctx context.Context, p coordinator.Policy) ([]coordinator.Snapshot, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("memory coordinator: list: %w", err)
	}
	if err := p.Validate(); err != nil {
		return nil, fmt.Errorf("memory coordinator: list: %w", err)
	}
	r := newRules(p)
	c.mu.Lock()
	now := c.clock().UnixMilli()
	var out []coordinator.Snapshot
	for scope, b := range c.scopes {
		if s := b.snapshot(r, scope, now); s.Generation != 0 {
			out = append(out, s)
		}
	}
	c.mu.Unlock()
	slices.SortFunc(out, func(a, b coordinator.Snapshot) int { return strings.Compare(a.Scope, b.Scope) })
	return out, nil
}
