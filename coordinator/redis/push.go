package redis

import (
	"context"
	"strconv"

	"github.com/cbgrpc/cbgrpc/coordinator"
)

var _ coordinator.Pusher = (*Coordinator)(nil)

// Push implements [coordinator.Pusher] with one script, push.lua.
func (c *Coordinator) Push(ctx context.Context, q coordinator.PushRequest) (coordinator.Result, error) {
	if err := coordinator.CheckPushReason(q.Reason); err != nil {
		return coordinator.Result{}, opError("push", q.Scope, err)
	}
	return c.result(ctx, c.client, c.scripts.push, "push", q.Scope, q.Policy, coordinator.Seen(q.Seen, coordinator.Outcome{Generation: q.Generation}),
		strconv.FormatUint(q.Generation, 10), coordinator.PushPeriod(q.Policy, q.Period).Milliseconds(), q.Reason)
}
