package redis

import (
	"context"
	"strconv"

	"github.com/cbgrpc/cbgrpc/coordinator"
)

var _ coordinator.CauseKeeper = (*Coordinator)(nil)

// KeepCause implements [coordinator.CauseKeeper] with one script,
// cause.lua, which publishes the transition again with its cause.
func (c *Coordinator) KeepCause(ctx context.Context, q coordinator.CauseRequest) (bool, error) {
	if err := coordinator.CheckCause(q.Cause); err != nil {
		return false, opError("keep cause", q.Scope, err)
	}
	set, err := c.scriptSet(ctx)
	if err != nil {
		return false, opError("keep cause", q.Scope, err)
	}
	k := scopeKeys(c.prefix, q.Scope)
	kept, err := set.cause.Run(ctx, c.client, []string{k[keyState], k[keyChannel]},
		strconv.FormatUint(q.Generation, 10), int(q.State), q.Cause).Int()
	if err != nil {
		return false, opError("keep cause", q.Scope, err)
	}
	return kept == 1, nil
}
