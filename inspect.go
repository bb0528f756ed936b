package cbgrpc

import (
	"context"
	"errors"
	"fmt"

	"github.com/cbgrpc/cbgrpc/coordinator"
)

// ErrNoLister is returned by [Breaker.List] when the coordinator does not
// implement [coordinator.Lister].
var ErrNoLister = errors.New("cbgrpc: the coordinator cannot list its scopes")

// Snapshot asks the coordinator for scope's state as of now, under this
// Breaker's policy: the window's counts, the open period, an operator's
// note, and why and when it last tripped (coordinator.Snapshot.LastTrip).
// Looking changes nothing, not even this process's knowledge of the
// scope. A scope that is not born reads closed in generation 0. It waits
// at most 10 s, like an operator's command, and fails with [ErrShut]
// once the Breaker is closed.
func (b *Breaker) Snapshot(ctx context.Context, scope string) (coordinator.Snapshot, error) {
	var s coordinator.Snapshot
	err := b.inspect(ctx, "snapshot", scope, func(ctx context.Context) (err error) {
		s, err = b.c.Snapshot(ctx, scope, b.known.policyOf(scope).p)
		return err
	})
	if err != nil {
		return coordinator.Snapshot{}, fmt.Errorf("cbgrpc: snapshot %q: %w", scope, err)
	}
	return s, nil
}

// Policy returns the policy this Breaker runs scope on now, and where it
// came from: the policy of [WithPolicy], laid under the fleet default and
// the scope's own override when an operator set them in the coordinator
// (see [coordinator.Controller].SetOverride). A scope this process has not
// used lately runs on the code's policy under the fleet default until the
// coordinator's first answer about it tells of an override of its own.
func (b *Breaker) Policy(scope string) (coordinator.Policy, coordinator.PolicySource) {
	f := b.known.policyOf(scope)
	return f.p, f.src
}

// List asks the coordinator for a snapshot of every scope it holds state
// for, under this Breaker's policy, if it is a [coordinator.Lister]. A
// scope whose stored state is corrupt is listed with only its Scope and
// Corrupt set, beside the others. It is an operator's tool: see
// [coordinator.Lister].
func (b *Breaker) List(ctx context.Context) ([]coordinator.Snapshot, error) {
	l, ok := b.c.(coordinator.Lister)
	if !ok {
		return nil, fmt.Errorf("%w: %T", ErrNoLister, b.c)
	}
	var list []coordinator.Snapshot
	err := b.inspect(ctx, "list", "", func(ctx context.Context) (err error) {
		list, err = l.List(ctx, b.cfg.policy)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("cbgrpc: list: %w", err)
	}
	return list, nil
}

// inspect makes a look at the coordinator through the one round-trip
// helper (an operator's timeout, the panic guard, the metrics), learning
// nothing from it: looking changes nothing.
func (b *Breaker) inspect(ctx context.Context, op, scope string, f func(context.Context) error) error {
	if !b.enter() {
		return ErrShut
	}
	defer b.admits.Done()
	_, err := b.roundTrip(ctx, exchange{op: op, scope: scope, timeout: operatorTimeout, wg: &b.admits},
		func(ctx context.Context, _ uint64) (answer, error) { return answer{}, f(ctx) })
	return err
}
