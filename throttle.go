package cbgrpc

import (
	"context"
	"fmt"
	"math/rand/v2"

	"go.opentelemetry.io/otel/trace"

	"github.com/cbgrpc/cbgrpc/coordinator"
)

// Adaptive throttling (Policy.Throttle), from the Google SRE book's
// "Handling Overload", made fleet-wide: while a scope is closed, each call
// is rejected here with probability
//
//	max(0, (requests − K × accepts) / (requests + 1))
//
// where requests are the calls and throttled requests of the scope's
// shared window, and accepts its calls that did not fail, as the last
// Record answer of this process said them. A replica thus throttles by the
// fleet's counts, not by its own small sample, and asks nothing more of
// the coordinator: the counts come with the Records it makes anyway.
//
// Slow calls count as accepted: the dependency served them, and slowness
// has a rule of its own (SlowCallRatio); throttling answers a dependency
// that refuses or fails work, as the classifier says.
//
// The throttle rejects nothing while the window holds fewer calls than
// MinCalls (or ConsecutiveFailures, if larger): a dependency that fails
// every call would otherwise be starved of the calls the trip rules need,
// since with no accepts the formula lets through only about one call per
// window, and the breaker would never open.

// throttleShare is the share of calls to reject by the counts w under p.
func throttleShare(p *coordinator.Policy, w *window) float64 {
	if p.Throttle == 0 || w.calls < max(p.MinCalls, p.ConsecutiveFailures, 1) {
		return 0
	}
	requests := float64(w.calls + w.throttled)
	accepts := float64(w.calls - w.failures)
	return max(0, (requests-p.Throttle*accepts)/(requests+1))
}

// throttling decides a call that the breaker admits while closed by
// throttleShare of w, the fleet's window of the generation admitted
// under: a rejected call gets the rejection, ErrOpen, and is to be counted
// in the window as a throttled request (never a call); nil admits it.
// Each call draws on its own from math/rand/v2's generator, which needs
// no lock.
func (b *Breaker) throttling(ctx context.Context, c *call, w *window, p *coordinator.Policy) *OpenError {
	share := throttleShare(p, w)
	if share == 0 || rand.Float64() >= share {
		return nil
	}
	e := &OpenError{Scope: c.scope, State: coordinator.StateClosed,
		Reason: fmt.Sprintf("throttled, %d%% of calls rejected: the fleet's window holds %d requests and %d accepted",
			int(share*100), w.calls+w.throttled, w.calls-w.failures)}
	b.tel.decision(ctx, c, coordinator.Reject, byThrottle)
	b.tel.rejected(ctx, c, e, byThrottle, trace.SpanContext{})
	return e
}
