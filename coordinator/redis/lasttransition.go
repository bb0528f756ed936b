package redis

import (
	"context"
	"errors"
	"fmt"

	goredis "github.com/redis/go-redis/v9"

	"github.com/cbgrpc/cbgrpc/coordinator"
)

// LastTransition returns the last transition the feed carried for scope,
// as its state keeps it for cause.lua, and false when there is none: the
// scope has not moved since it was born, or has no state. A Watch misses
// what was published before Follow returned; read after Follow, this is
// the last of it. Its Cause is left out. A stored transition that does
// not parse is an error wrapping [coordinator.ErrCorruptState].
func (c *Coordinator) LastTransition(ctx context.Context, scope string) (coordinator.Transition, bool, error) {
	moved, err := c.client.HGet(ctx, scopeKeys(c.prefix, scope)[keyState], "moved").Result()
	switch {
	case errors.Is(err, goredis.Nil):
		return coordinator.Transition{}, false, nil
	case corrupt(err):
		return coordinator.Transition{}, false, opError("last transition", scope, fmt.Errorf("%w: %w", coordinator.ErrCorruptState, err))
	case err != nil:
		return coordinator.Transition{}, false, opError("last transition", scope, err)
	}
	t, ok := parseMove(scope, moved)
	if !ok {
		return coordinator.Transition{}, false, opError("last transition", scope,
			fmt.Errorf("%w: state hash field moved holds %.64q", coordinator.ErrCorruptState, moved))
	}
	return t, true, nil
}
