package memory

import (
	"context"
	"fmt"
	"maps"
	"sync"
	"time"

	"github.com/cbgrpc/cbgrpc/coordinator"
	"github.com/cbgrpc/cbgrpc/coordinator/implement"
)

// Coordinator is an in-process coordinator. The zero value is not usable;
// call [New].
type Coordinator struct {
	clock func() time.Time

	mu     sync.Mutex
	scopes map[string]*breaker
	// watches are the open subscriptions to the transition feed.
	watches map[*watch]struct{}
	// policies are the overrides of the shared policy (policy.go).
	policies overrides
	// ops counts operations since the last sweep of expired scopes,
	// swept is the clock's time of it, in Unix ms, and most is the most
	// scopes a sweep found since scopes was last made anew (sweep).
	ops   int
	swept int64
	most  int
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
// and publishes the transitions it makes. Every operation but Snapshot
// writes: it gives birth to a scope that is not born, or whose generation
// lies below seen, what the caller has seen of it (rule 4 of the contract, docs/architecture.md;
// [implement.NextGeneration], [implement.Seen]), and ends an
// isolation whose time has passed, before f runs. That lapse is reported
// by the operation unless f reports a transition of its own (see
// breaker.report).
func (c *Coordinator) op(ctx context.Context, name, scope string, p coordinator.Policy, seen uint64, f func(b *breaker, r *rules, now int64) *coordinator.Transition) error {
	if err := coordinator.CheckScope(scope); err != nil {
		return fmt.Errorf("memory coordinator: %s %q: %w", name, scope, err)
	}
	return c.locked(ctx, name, scope, p, func(r *rules, now int64) {
		seen := implement.Credible(seen, time.UnixMilli(now))
		b := c.scopes[scope]
		if b == nil || b.expired(now) || b.gen < seen {
			b = born(scope, b, seen, r, now)
			c.scopes[scope] = b
		}
		if b.lapsed = b.lapse(r, now); b.lapsed != nil {
			c.publish(b.lapsed)
			b.moved, b.cause = b.lapsed, ""
		}
		// A replica's own transition is the replica's business: the feed
		// carries the scope's.
		if t := f(b, r, now); t != nil && t != b.lapsed && t.Replica == "" {
			c.publish(t)
			b.moved, b.cause = t, ""
		}
		b.lapsed = nil
	})
}

// locked validates the policy and runs f under the lock with the time read
// once.
func (c *Coordinator) locked(ctx context.Context, name, scope string, p coordinator.Policy, f func(r *rules, now int64)) error {
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
	c.sweep(r, now)
	f(r, now)
	return nil
}

// sweep forgets closed scopes whose window has run out. It visits every
// scope once len(scopes) operations have come since the last sweep, or once
// the clock has moved by the window of the operation's policy (r): O(1) per
// operation, amortised, and at a trickle of operations a scope is still
// forgotten by the first operation that comes a window after its own ran
// out (the window of that operation's policy), so that memory follows the
// scopes in use. A scope is dropped only once its
// generation lies below now in the units of [implement.NextGeneration],
// so that its next birth is the same with or without it: a generation
// borrowed from a later millisecond must still be known to be skipped.
func (c *Coordinator) sweep(r *rules, now int64) {
	c.ops++
	if c.ops < len(c.scopes) && now-c.swept < r.width*r.buckets {
		return
	}
	c.ops, c.swept = 0, now
	c.most = max(c.most, len(c.scopes))
	floor := implement.NextGeneration(0, time.UnixMilli(now))
	for s, b := range c.scopes {
		if b.expired(now) && b.gen < floor {
			delete(c.scopes, s)
		}
	}
	// A map keeps the room of the entries deleted from it, and so does
	// its clone: once most of them are gone, the rest move to a new map.
	if len(c.scopes) < c.most/4 {
		c.scopes, c.most = maps.Collect(maps.All(c.scopes)), len(c.scopes)
	}
}

// Admit implements [coordinator.Coordinator].
func (c *Coordinator) Admit(ctx context.Context, q coordinator.AdmitRequest) (coordinator.Decision, error) {
	var d coordinator.Decision
	err := c.op(ctx, "admit", q.Scope, q.Policy, implement.Seen(q.Seen), func(b *breaker, r *rules, now int64) *coordinator.Transition {
		d = b.admit(r, now, q.Claim)
		d.PolicyVersion = c.policyVersion(q.Scope)
		d.Cause = b.causeOf(d.State, d.RampLeft, d.Transition)
		return d.Transition
	})
	return d, err
}

// Record implements [coordinator.Coordinator].
func (c *Coordinator) Record(ctx context.Context, q coordinator.RecordRequest) (coordinator.Result, error) {
	var res coordinator.Result
	fp := q.Policy.Fingerprint()
	err := c.op(ctx, "record", q.Scope, q.Policy, implement.Seen(q.Seen, q.Outcomes...), func(b *breaker, r *rules, now int64) *coordinator.Transition {
		b.carry(r, now, fp, q.Source)
		res = b.record(r, now, q)
		res.PolicyVersion = c.policyVersion(q.Scope)
		return res.Transition
	})
	return res, err
}

// Settle implements [coordinator.Coordinator].
func (c *Coordinator) Settle(ctx context.Context, q coordinator.SettleRequest) (coordinator.Result, error) {
	var res coordinator.Result
	err := c.op(ctx, "settle", q.Scope, q.Policy, implement.Seen(q.Seen, q.Outcome), func(b *breaker, r *rules, now int64) *coordinator.Transition {
		res = b.settle(r, now, q.Claim, q.Outcome)
		res.PolicyVersion = c.policyVersion(q.Scope)
		return res.Transition
	})
	return res, err
}

// Snapshot implements [coordinator.Coordinator]. It writes nothing: a
// scope that is not born reads so, generation 0.
func (c *Coordinator) Snapshot(ctx context.Context, scope string, p coordinator.Policy) (coordinator.Snapshot, error) {
	var s coordinator.Snapshot
	err := c.locked(ctx, "snapshot", scope, p, func(r *rules, now int64) {
		s = c.scopes[scope].snapshot(r, scope, now)
	})
	return s, err
}

// HonoursDeadlines implements [coordinator.Bounded]: no call waits for
// anything but a lock held for microseconds.
func (c *Coordinator) HonoursDeadlines() bool { return true }
