package cbgrpc

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/cbgrpc/cbgrpc/coordinator"
)

// health is what this process knows of the coordinator itself. After an
// error, calls decide without it for the back-off, then one call at a time
// asks again; from the error until a call succeeds, nothing is answered
// from the table either: Records are failing too, and a trip could go
// unheard.
type health struct {
	backoff time.Duration
	// downUntil is when calls may ask again (UnixNano; 0 while the
	// coordinator works). trying lets one call ask after the back-off,
	// while the others keep deciding without it.
	downUntil atomic.Int64
	trying    atomic.Bool
	failing   atomic.Bool
	// complaints are the failures reported since it last worked (ready.go).
	complaints complaints
}

// mayAsk reports whether a call may ask the coordinator: yes while it
// works; during the back-off no; after it, one call at a time.
func (h *health) mayAsk() bool {
	until := h.downUntil.Load()
	if until == 0 {
		return true
	}
	if time.Now().UnixNano() < until {
		return false
	}
	return h.trying.CompareAndSwap(false, true)
}

// inBackoff reports whether calls are deciding without the coordinator.
func (h *health) inBackoff() bool {
	until := h.downUntil.Load()
	return until != 0 && time.Now().UnixNano() < until
}

func (h *health) backoffLeft() time.Duration {
	until := h.downUntil.Load()
	if until == 0 {
		return 0
	}
	return max(0, time.Until(time.Unix(0, until)))
}

// trusted reports whether answers kept in the table may decide calls:
// not from a coordinator error until a call succeeds again.
func (h *health) trusted() bool { return !h.failing.Load() }

// failed notes a coordinator error, unless the error concerns one scope's
// data only: the coordinator works for the others, so that scope alone is
// undecidable. An admission's error also starts the back-off, which
// spares the following calls the timeout; the error of a Record, a Settle
// or an operator's command costs no call any time, and does not: the next
// admission finds out for itself, rather than let a whole back-off of
// calls through by the failure policy because one Record was slow.
func (h *health) failed(err error, admission bool) {
	h.trying.Store(false)
	if errors.Is(err, coordinator.ErrCorruptState) {
		return
	}
	h.failing.Store(true)
	if admission {
		h.downUntil.Store(time.Now().Add(h.backoff).UnixNano())
	}
}

// succeeded ends a back-off: the coordinator answered.
func (h *health) succeeded() {
	if h.downUntil.Load() != 0 {
		h.downUntil.Store(0)
	}
	if h.failing.Load() {
		h.failing.Store(false)
		h.complaints.reset()
	}
	h.trying.Store(false)
}

// abandoned is a call whose caller gave up before the coordinator
// answered: the coordinator is not to blame, and another call may try.
func (h *health) abandoned() { h.trying.Store(false) }

// decideWithout decides a call while the coordinator is unavailable, or
// cannot decide the scope because its stored state is corrupt (cause is
// the coordinator's error, or nil when the call did not ask): a scope last
// seen not closed is rejected, others follow the failure policy. There is
// deliberately no local breaker to fall back on: it would be the
// per-replica breaker the shared one replaces, at the worst moment.
func (b *Breaker) decideWithout(ctx context.Context, c *call, cause error) error {
	scope := c.scope
	retry := b.health.backoffLeft()
	var e *OpenError
	by := byFailurePolicy
	unavailable, corrupt := "coordinator unavailable", error(nil)
	if errors.Is(cause, coordinator.ErrCorruptState) {
		unavailable, corrupt = "stored state unusable", cause
	}
	var link trace.SpanContext
	if f, ok := b.known.notClosed(scope); ok {
		link = f.cause
		retry = max(retry, f.until.Sub(instantNow()))
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
