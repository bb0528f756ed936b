package cbgrpc

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"go.opentelemetry.io/otel"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Class is what an ended call says about the health of its dependency.
type Class int

const (
	// Success: the dependency answered. Counted as a call.
	Success Class = iota
	// Failure: the dependency failed. Counted as a call and a failure.
	Failure
	// Ignore: the call says nothing about the dependency (the caller gave
	// up, for instance). Not counted at all.
	Ignore
)

func (c Class) String() string {
	switch c {
	case Success:
		return "success"
	case Failure:
		return "failure"
	case Ignore:
		return "ignore"
	}
	return "Class(" + strconv.Itoa(int(c)) + ")"
}

// Classifier decides what the error of an ended call means. err is nil for
// a call that succeeded. A Breaker never passes its own rejections
// ([ErrOpen]) to a Classifier: they are never an outcome.
//
// A Classifier that panics does not crash the caller, nor change the
// call's result: the call is classified by [DefaultClassifier] instead,
// and the panic goes to the OpenTelemetry error handler (otel.Handle).
// Ignoring the outcome would leave a dependency unprotected for as long
// as the classifier panics; counting it a failure would trip a breaker
// over a healthy one.
type Classifier func(ctx context.Context, method string, err error) Class

// classify runs the call's Classifier (the Breaker's when f is nil),
// falling back on DefaultClassifier when it panics.
func (b *Breaker) classify(ctx context.Context, f Classifier, method string, err error) (c Class) {
	if f == nil {
		if b.cfg.plainClassifier {
			return DefaultClassifier(ctx, method, err)
		}
		f = b.cfg.classifier
	}
	defer func() {
		if r := recover(); r != nil {
			otel.Handle(fmt.Errorf("cbgrpc: the classifier panicked on %s; DefaultClassifier decided instead: %v", method, r))
			c = DefaultClassifier(ctx, method, err)
		}
	}()
	return f(ctx, method, err)
}

// DefaultClassifier counts as failures the codes that say the dependency
// is in trouble: Unavailable, DeadlineExceeded, Internal, Unknown and
// DataLoss. Canceled is ignored: the caller gave up, which says nothing
// about the server. Every other code is a success, because the server
// answered (NotFound, InvalidArgument, PermissionDenied, ResourceExhausted
// and the like are answers).
//
// An error that carries no gRPC status counts as Unknown, except the
// context errors, which count as Canceled and DeadlineExceeded, as gRPC
// itself reports them.
func DefaultClassifier(_ context.Context, _ string, err error) Class {
	switch codeOf(err) {
	case codes.OK:
		return Success
	case codes.Canceled:
		return Ignore
	case codes.Unavailable, codes.DeadlineExceeded, codes.Internal, codes.Unknown, codes.DataLoss:
		return Failure
	}
	return Success
}

// FailOn returns a Classifier under which exactly the given codes are
// failures. Canceled is ignored unless it is listed; every other code is
// a success.
func FailOn(failures ...codes.Code) Classifier {
	set := make(map[codes.Code]bool, len(failures))
	for _, c := range failures {
		set[c] = true
	}
	return func(_ context.Context, _ string, err error) Class {
		c := codeOf(err)
		switch {
		case set[c]:
			return Failure
		case c == codes.Canceled:
			return Ignore
		}
		return Success
	}
}

func codeOf(err error) codes.Code {
	if err == nil {
		return codes.OK
	}
	if s, ok := status.FromError(err); ok {
		return s.Code()
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return status.FromContextError(err).Code()
	}
	return codes.Unknown
}
