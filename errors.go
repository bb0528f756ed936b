package cbgrpc

import (
	"errors"
	"fmt"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/cbgrpc/cbgrpc/coordinator"
)

// ErrOpen is matched by every rejection: errors.Is(err, ErrOpen) holds for
// each error a Breaker returns instead of running a call. The error itself is
// an [*OpenError], which also carries gRPC status Unavailable, so callers that
// only look at status codes see a retryable failure.
var ErrOpen = errors.New("cbgrpc: circuit breaker open")

// OpenError is the error of a rejected call. Use errors.As to read how long
// the caller should wait before trying again. A call refused because its
// scope's stored state is unusable (the coordinator's error wraps
// [coordinator.ErrCorruptState]) also matches that error.
type OpenError struct {
	Scope string
	// State is the breaker's state as this process knows it: open, or
	// half-open with every probe slot taken. A call rejected by
	// [FailClosed] for a scope never seen open reads closed, and so does
	// one rejected by the ramp after a recovery (Policy.RampFor) or by
	// adaptive throttling (Policy.Throttle).
	State coordinator.State
	// RetryAfter is how long until a call may be admitted again: until
	// probes may start, until a probe slot may free up, while the
	// coordinator is unreachable, until it is asked again, or until the
	// ramp after a recovery admits every call. Zero when unknown, and for
	// a call throttled adaptively, which the next call may pass.
	RetryAfter time.Duration
	// Reason says why, for people: "open", "coordinator unavailable", ...
	Reason string
	// Outlier is set when the coordinator found this replica failing alone
	// (Policy.Outliers): the scope is open for this replica only, while
	// the fleet's breaker is closed.
	Outlier bool

	// corrupt is the coordinator's error about this scope's stored state.
	corrupt error
}

func (e *OpenError) Error() string {
	msg := fmt.Sprintf("cbgrpc: circuit breaker %s for scope %q", e.State, e.Scope)
	if e.Reason != "" {
		msg += ": " + e.Reason
	}
	if e.RetryAfter > 0 {
		msg += fmt.Sprintf("; retry after %v", e.RetryAfter.Round(time.Millisecond))
	}
	return msg
}

// Is makes errors.Is(err, ErrOpen) hold.
func (e *OpenError) Is(target error) bool { return target == ErrOpen }

// Unwrap makes errors.Is(err, coordinator.ErrCorruptState) hold for a call
// refused because its scope's stored state is unusable; it is nil for
// every other rejection.
func (e *OpenError) Unwrap() error { return e.corrupt }

// GRPCStatus makes status.Code(err) report Unavailable: the dependency is
// treated as unavailable and the call was not sent.
func (e *OpenError) GRPCStatus() *status.Status {
	return status.New(codes.Unavailable, e.Error())
}
