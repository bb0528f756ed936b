package memory

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/cbgrpc/cbgrpc/coordinator"
)

// Coordinator is an in-process coordinator. The zero value is not usable;
// call [New].
type Coordinator struct {
	clock func() time.Time

	mu     sync.Mutex
	scopes map[string]*breaker
	// watches are the open subscriptions to the transition feed.
	watches map[*watch]struct{}
	// ops counts operations since the last sweep of expired scopes, so
	// that sweeping costs O(1) per operation, amortised.
	ops int
}

// Option configures a [Coordinator].
type Option interface{ apply(*Coordinator) }

type clockOption func() time.Time

func (o clockOption) apply(c *Coordinator) { c.clock = o }

// WithClock makes the coordinator read time from clock instead of
// time.Now; nil is ignored. Tests use it to drive the breaker through its
// states without sleeping.
func WithClock(clock func() time.Time) Option {
	return clockOption(clock)
}

// New returns an empty in-process coordinator.
func New(opts ...Option) *Coordinator {
	c := &Coordinator{clock: time.Now, scopes: make(map[string]*breaker)}
	for _, o := range opts {
		if o == nil {
			continue
		}
		if co, ok := o.(clockOption); ok && co == nil {
			continue
		}
		o.apply(c)
	}
	return c
}

var _ coordinator.Coordinator = (*Coordinator)(nil)

// op runs f on the scope's breaker under the lock, with the time read once,
// and publishes the transition f reports, if any.
func (c *Coordinator) op(ctx context.Context, name, scope string, p coordinator.Policy, f func(b *breaker, r *rules, now int64) *coordinator.Transition) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("memory coordinator: %s %q: %w", name, scope, err)
	}
	if err := p.Validate(); err != nil {
		return fmt.Errorf("memory coordinator: %s %q: %w", name, scope, err)
	}
	r := newRules(p)

	c.mu.Lock()
	defer c.mu.Unlock()
	// Read under the lock, so that operations apply in clock order.
	now := c.clock().UnixMilli()
	c.sweep(now)
	b := c.scopes[scope]
	if b == nil || b.expired(now) {
		b = &breaker{scope: scope}
		c.scopes[scope] = b
	}
	if t := f(b, r, now); t != nil {
		c.publish(t)
	}
	if b.expired(now) {
		// Nothing worth keeping: a fresh breaker reads the same.
		delete(c.scopes, scope)
	}
	return nil
}

// sweep forgets closed scopes whose window has run out, visiting every
// scope once per len(scopes) operations.
func (c *Coordinator) sweep(now int64) {
	c.ops++
	if c.ops < len(c.scopes) {
		return
	}
	c.ops = 0
	for s, b := range c.scopes {
		if b.expired(now) {
			delete(c.scopes, s)
		}
	}
}

// Admit implements [coordinator.Coordinator].
func (c *Coordinator) Admit(ctx context.Context, scope string, p coordinator.Policy, claim string) (coordinator.Decision, error) {
	var d coordinator.Decision
	err := c.op(ctx, "admit", scope, p, func(b *breaker, r *rules, now int64) *coordinator.Transition {
		d = b.admit(r, now, claim)
		return d.Transition
	})
	return d, err
}

// Record implements [coordinator.Coordinator].
func (c *Coordinator) Record(ctx context.Context, scope string, p coordinator.Policy, outcomes []coordinator.Outcome) (coordinator.Result, error) {
	var res coordinator.Result
	batch := coordinator.BatchID(ctx)
	err := c.op(ctx, "record", scope, p, func(b *breaker, r *rules, now int64) *coordinator.Transition {
		res = b.record(r, now, batch, outcomes)
		return res.Transition
	})
	return res, err
}

// Settle implements [coordinator.Coordinator].
func (c *Coordinator) Settle(ctx context.Context, scope string, p coordinator.Policy, claim string, o coordinator.Outcome) (coordinator.Result, error) {
	var res coordinator.Result
	err := c.op(ctx, "settle", scope, p, func(b *breaker, r *rules, now int64) *coordinator.Transition {
		res = b.settle(r, now, claim, o)
		return res.Transition
	})
	return res, err
}

// Snapshot implements [coordinator.Coordinator].
func (c *Coordinator) Snapshot(ctx context.Context, scope string, p coordinator.Policy) (coordinator.Snapshot, error) {
	var s coordinator.Snapshot
	err := c.op(ctx, "snapshot", scope, p, func(b *breaker, r *rules, now int64) *coordinator.Transition {
		s = b.snapshot(r, now)
		return nil
	})
	return s, err
}
