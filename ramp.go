package cbgrpc

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/cbgrpc/cbgrpc/coordinator"
)

// rampFloor is the share of calls the ramp after a recovery admits at its
// start (Policy.RampFor): enough to keep the dependency's warm-up and the
// breaker's window fed, few enough not to knock it over again.
const rampFloor = 0.1

// rampShare is the share of calls admitted with left to go of a ramp of
// rampFor: rising linearly from rampFloor to all of them.
func rampShare(left, rampFor time.Duration) float64 {
	if left <= 0 || rampFor <= 0 {
		return 1
	}
	done := 1 - float64(min(left, rampFor))/float64(rampFor)
	return rampFloor + (1-rampFloor)*done
}

// ramping decides a call that the breaker admits while closed with left
// to go of the ramp after a recovery: a share of the calls (rampShare) go
// through, and the others are rejected here, with ErrOpen, and never
// counted as outcomes. The coordinator counts the ramp on its own clock
// (Decision.RampLeft, a recovery heard on the feed), so the fleet ramps in
// step. A rejection links to cause, the span of the recovery. It returns
// the rejection, or nil to admit.
func (b *Breaker) ramping(ctx context.Context, c *call, left time.Duration, p *coordinator.Policy, cause trace.SpanContext) *OpenError {
	rampFor := p.RampFor
	if left <= 0 || rampFor <= 0 {
		return nil
	}
	share := rampShare(left, rampFor)
	if rand.Float64() < share {
		return nil
	}
	e := &OpenError{Scope: c.scope, State: coordinator.StateClosed, RetryAfter: left,
		Reason: fmt.Sprintf("ramping up after a recovery, %d%% of calls admitted", int(share*100))}
	b.tel.decision(ctx, c, coordinator.Reject, byRamp)
	b.tel.rejected(ctx, c, e, byRamp, cause)
	return e
}
