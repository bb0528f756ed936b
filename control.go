package cbgrpc

import (
	"context"
	"errors"
	"fmt"

	"github.com/cbgrpc/cbgrpc/coordinator"
)

// ErrNoController is returned by the operator's methods of a [Breaker]
// whose coordinator does not implement [coordinator.Controller].
var ErrNoController = errors.New("cbgrpc: the coordinator offers no manual control")

// Isolate forces scope's breaker open for the whole fleet, as
// [coordinator.Controller] describes, through this Breaker's coordinator
// and policy. Like every transition this process causes, the change is a
// span (a child of ctx's), counted in the metrics, and known to this
// process at once; the rest of the fleet hears of it on the transition
// feed.
func (b *Breaker) Isolate(ctx context.Context, scope string, n coordinator.Note) (coordinator.Result, error) {
	return b.control(ctx, scope, n, coordinator.Controller.Isolate)
}

// Release puts scope's breaker back to closed for the whole fleet; see
// [Breaker.Isolate].
func (b *Breaker) Release(ctx context.Context, scope string, n coordinator.Note) (coordinator.Result, error) {
	return b.control(ctx, scope, n, coordinator.Controller.Release)
}

// Disable lets every call of scope through, fleet-wide, until Enable; see
// [Breaker.Isolate].
func (b *Breaker) Disable(ctx context.Context, scope string, n coordinator.Note) (coordinator.Result, error) {
	return b.control(ctx, scope, n, coordinator.Controller.Disable)
}

// Enable puts a disabled breaker back under its rules; see
// [Breaker.Isolate].
func (b *Breaker) Enable(ctx context.Context, scope string, n coordinator.Note) (coordinator.Result, error) {
	return b.control(ctx, scope, n, coordinator.Controller.Enable)
}

type controlOp func(coordinator.Controller, context.Context, string, coordinator.Policy, coordinator.Note) (coordinator.Result, error)

func (b *Breaker) control(ctx context.Context, scope string, n coordinator.Note, op controlOp) (coordinator.Result, error) {
	ctl, ok := b.c.(coordinator.Controller)
	if !ok {
		return coordinator.Result{}, fmt.Errorf("%w: %T", ErrNoController, b.c)
	}
	epoch := b.learning(scope)
	res, err := op(ctl, ctx, scope, b.cfg.policy, n)
	if err != nil {
		return res, err
	}
	b.learnResult(epoch, scope, res)
	if res.Transition != nil {
		b.tel.transition(ctx, res.Transition, nil)
	}
	return res, nil
}
