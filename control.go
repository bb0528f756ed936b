package cbgrpc

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/cbgrpc/cbgrpc/coordinator"
)

// ErrNoController is returned by the operator's methods of a [Breaker]
// whose coordinator does not implement [coordinator.Controller].
var ErrNoController = errors.New("cbgrpc: the coordinator offers no manual control")

// ErrShut is returned by the operator's methods of a [Breaker] that has
// been shut by [Breaker.Close]. (A closed breaker, [coordinator.StateClosed],
// is one that admits calls: another thing.)
var ErrShut = errors.New("cbgrpc: the Breaker is shut")

// Isolate forces scope's breaker open for the whole fleet, as
// [coordinator.Controller] describes, through this Breaker's coordinator
// and policy. Like every transition this process causes, the change is a
// span (a child of ctx's), counted in the metrics, and known to this
// process at once; the rest of the fleet hears of it on the transition
// feed.
func (b *Breaker) Isolate(ctx context.Context, scope string, n coordinator.Note) (coordinator.Result, error) {
	return b.control(ctx, scope, "isolate", n, coordinator.Controller.Isolate)
}

// Release puts scope's breaker back to closed for the whole fleet; see
// [Breaker.Isolate].
func (b *Breaker) Release(ctx context.Context, scope string, n coordinator.Note) (coordinator.Result, error) {
	return b.control(ctx, scope, "release", n, coordinator.Controller.Release)
}

// Disable lets every call of scope through, fleet-wide, until Enable; see
// [Breaker.Isolate].
func (b *Breaker) Disable(ctx context.Context, scope string, n coordinator.Note) (coordinator.Result, error) {
	return b.control(ctx, scope, "disable", n, coordinator.Controller.Disable)
}

// Enable puts a disabled breaker back under its rules; see
// [Breaker.Isolate].
func (b *Breaker) Enable(ctx context.Context, scope string, n coordinator.Note) (coordinator.Result, error) {
	return b.control(ctx, scope, "enable", n, coordinator.Controller.Enable)
}

type controlOp func(coordinator.Controller, context.Context, coordinator.CommandRequest) (coordinator.Result, error)

func (b *Breaker) control(ctx context.Context, scope, op string, n coordinator.Note, f controlOp) (coordinator.Result, error) {
	ctl, ok := b.c.(coordinator.Controller)
	if !ok {
		return coordinator.Result{}, fmt.Errorf("%w: %T", ErrNoController, b.c)
	}
	// The caller's mistake, not the coordinator's: no round trip.
	if err := cmp.Or(coordinator.CheckScope(scope), n.Validate(op)); err != nil {
		return coordinator.Result{}, fmt.Errorf("cbgrpc: %s %q: %w", op, scope, err)
	}
	if !b.enter() {
		return coordinator.Result{}, ErrShut
	}
	defer b.admits.Done()
	var res coordinator.Result
	_, err := b.roundTrip(ctx, exchange{op: op, scope: scope, timeout: operatorTimeout, wg: &b.admits},
		func(ctx context.Context, seen uint64) (answer, error) {
			var err error
			res, err = f(ctl, ctx, coordinator.CommandRequest{Scope: scope, Policy: b.known.policyOf(scope).p, Note: n, Seen: seen})
			return resulted(res), err
		})
	return res, err
}

// operatorTimeout bounds an operator's command through a Breaker: a
// person is waiting, not a call, so it is longer than the coordinator
// timeout, but a coordinator that does not answer still gets an answer.
const operatorTimeout = 10 * time.Second
