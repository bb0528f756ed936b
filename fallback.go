package cbgrpc

import (
	"context"
	"errors"
	"fmt"

	"go.opentelemetry.io/otel"
)

// Fallback makes the result of a unary call the Breaker did not let
// through: it may fill reply (a cached or default answer) and return nil,
// or return an error, and what it returns is the call's result. err is why
// the call did not succeed: the rejection (an [*OpenError], matching
// [ErrOpen]), or under [WithFallbackOnFailures] the call's own error.
// method is the full method ("/pkg.Service/Method"), req and reply the
// call's messages (for a generated client, pointers to its request and
// response types).
type Fallback func(ctx context.Context, method string, req, reply any, err error) error

// WithFallback makes f the result of every unary call the Breaker rejects,
// by any of its rules: the breaker open or out of probe slots, the ramp
// after a recovery, or [FailClosed] while the coordinator is down. It is
// not called when the server fails (see [WithFallbackOnFailures]), when the
// caller's context ends before the call is admitted, for calls that run
// outside the breaker ([Unprotected], an empty scope, an excluded method),
// nor for streams, which have no one reply to fill. nil is ignored; of
// WithFallback and WithFallbackOnFailures the last given wins.
//
// What f does is never an outcome: a rejected call is not counted, served
// or not, and a failure served by f still counts as the failure it was. A
// fallback that succeeds is no sign that the dependency recovered; only
// probes are. A served rejection still shows in telemetry as a rejection.
// f runs on the call's path, in the caller's goroutine: keep it quick.
//
// A fallback that panics does not crash the caller: the call returns the
// error it would have returned without a fallback (the rejection, or the
// server's error), and the panic goes to the OpenTelemetry error handler
// (otel.Handle).
func WithFallback(f Fallback) Option {
	return optionFunc(func(c *config) {
		if f != nil {
			c.fallback, c.fallbackOn = f, false
		}
	})
}

// WithFallbackOnFailures is [WithFallback], and f also serves the unary
// calls that reach the server and fail, as the call's classifier counts
// failures ([WithClassifier], [CallClassifier]): by default Unavailable,
// DeadlineExceeded, Internal, Unknown and DataLoss, but not Canceled (the
// caller gave up) nor an answer such as NotFound. f tells the two apart
// with errors.Is(err, ErrOpen). The failure is counted before f runs,
// whatever f returns.
func WithFallbackOnFailures(f Fallback) Option {
	return optionFunc(func(c *config) {
		if f != nil {
			c.fallback, c.fallbackOn = f, true
		}
	})
}

// rejected returns the result of a unary call that was not admitted with
// err: the fallback's, for a rejection.
func (b *Breaker) rejected(ctx context.Context, method string, req, reply any, err error) error {
	if b.cfg.fallback == nil || !errors.Is(err, ErrOpen) {
		return err
	}
	return b.fallBack(ctx, method, req, reply, err)
}

// failed returns the result of a unary call that ended with err, classified
// class: the fallback's, for a failure the fallback serves.
func (b *Breaker) failed(ctx context.Context, method string, req, reply any, err error, class Class) error {
	if err == nil || class != Failure || !b.cfg.fallbackOn {
		return err
	}
	return b.fallBack(ctx, method, req, reply, err)
}

// fallBack runs the fallback; when it panics, the call keeps its own error.
func (b *Breaker) fallBack(ctx context.Context, method string, req, reply any, err error) (result error) {
	defer func() {
		if r := recover(); r != nil {
			otel.Handle(fmt.Errorf("cbgrpc: the fallback panicked on %s; the call returns its own error (%v): %v", method, err, r))
			result = err
		}
	}()
	return b.cfg.fallback(ctx, method, req, reply, err)
}
