package redis

import (
	"context"
	"strconv"

	"github.com/cbgrpc/cbgrpc/coordinator"
	"github.com/cbgrpc/cbgrpc/coordinator/implement"
)

var _ coordinator.Pusher = (*Coordinator)(nil)

// Push implements [coordinator.Pusher] with one script, push.lua.
func (c *Coordinator) Push(ctx context.Context, q coordinator.PushRequest) (coordinator.Result, error) {
	if err := implement.CheckPushReason(q.Reason); err != nil {
		return coordinator.Result{}, opError("push", q.Scope, err)
	}
	return c.result(ctx, c.client, pushScript, "push", q.Scope, q.Policy, implement.Seen(q.Seen, coordinator.Outcome{Generation: q.Generation}),
		strconv.FormatUint(q.Generation, 10), implement.PushPeriod(q.Policy, q.Period).Milliseconds(), q.Reason)
}
