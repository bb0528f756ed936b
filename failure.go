package cbgrpc

import (
	"context"
	"errors"

	"go.opentelemetry.io/otel/trace"

	"github.com/cbgrpc/cbgrpc/coordinator"
	"github.com/cbgrpc/cbgrpc/internal/instant"
)

// decideWithout decides a call while the coordinator is unavailable, or
// cannot decide the scope because its stored state is corrupt (cause is
// the coordinator's error, or nil when the call did not ask): a scope last
// seen not closed is rejected, others follow the failure policy. There is
// deliberately no local breaker to fall back on: it would be the
// per-replica breaker the shared one replaces, at the worst moment.
func (b *Breaker) decideWithout(ctx context.Context, c *call, cause error) error {
	scope := c.scope
	retry := b.health.BackoffLeft()
	var e *OpenError
	by := byFailurePolicy
	unavailable, corrupt := "coordinator unavailable", error(nil)
	if errors.Is(cause, coordinator.ErrCorruptState) {
		unavailable, corrupt = "stored state unusable", cause
	}
	var link trace.SpanContext
	if f, ok := b.known.notClosed(scope); ok {
		link = f.cause
		retry = max(retry, f.until.Sub(instant.Now()))
		by = byKnownState
		e = &OpenError{Scope: scope, State: f.state, RetryAfter: retry, corrupt: corrupt,
			Reason: unavailable + " and the scope was last seen " + f.state.String()}
	} else if b.cfg.failure == FailClosed {
		e = &OpenError{Scope: scope, State: coordinator.StateClosed, RetryAfter: retry, corrupt: corrupt,
			Reason: unavailable + " (fail-closed)"}
	}
	verdict := coordinator.Allow
	if e != nil {
		verdict = coordinator.Reject
	}
	b.tel.decision(ctx, c, verdict, by)
	coordinatorFailure(ctx, scope, verdict, by, b.cfg.failure, cause)
	if e != nil {
		b.tel.rejected(ctx, c, e, by, link)
		return e
	}
	c.fate = unadmitted
	return nil
}
