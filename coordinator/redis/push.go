package redis

import (
	"context"
	"strconv"
	"time"

	"github.com/cbgrpc/cbgrpc/coordinator"
)

var _ coordinator.Pusher = (*Coordinator)(nil)

// Push implements [coordinator.Pusher] with one script, push.lua.
func (c *Coordinator) Push(ctx context.Context, scope string, p coordinator.Policy, gen uint64, period time.Duration, reason string) (coordinator.Result, error) {
	if err := coordinator.CheckPushReason(reason); err != nil {
		return coordinator.Result{}, opError("push", scope, err)
	}
	return c.result(ctx, c.client, c.scripts.push, "push", scope, p, coordinator.Seen(ctx, coordinator.Outcome{Generation: gen}),
		strconv.FormatUint(gen, 10), coordinator.PushPeriod(p, period).Milliseconds(), reason)
}
