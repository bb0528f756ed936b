package cbgrpc

import (
	"context"
	"errors"
	"time"

	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"

	"github.com/cbgrpc/cbgrpc/coordinator"
)

// Unary returns the unary client interceptor of a new Breaker over c, for
// the dial-option one-liner. It panics with a message naming the option
// when an option cannot work; use [New] to get the error instead, and to
// share one Breaker (and its Close) between unary and stream calls.
func Unary(c coordinator.Coordinator, opts ...Option) grpc.UnaryClientInterceptor {
	return mustNew("Unary", c, opts).UnaryClientInterceptor()
}

// UnaryClientInterceptor returns the interceptor that protects unary calls:
// admit, invoke, classify, then record the outcome (or settle the probe) in
// the background. A rejected call returns an error matching [ErrOpen]
// without reaching the network.
func (b *Breaker) UnaryClientInterceptor() grpc.UnaryClientInterceptor {
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		scope, err := b.safeScopeOf(ctx, target(cc), method)
		if err != nil {
			return err
		}
		if scope == "" {
			return invoker(ctx, method, req, reply, cc, opts...)
		}
		t, err := b.admit(ctx, scope)
		if err != nil {
			return err
		}
		err = invoker(ctx, method, req, reply, cc, opts...)
		b.finish(ctx, t, method, err)
		return err
	}
}

func target(cc *grpc.ClientConn) string {
	if cc == nil {
		return ""
	}
	return cc.Target()
}

// finish classifies the end of an admitted call and hands its outcome to
// the recorder. It never changes the call's result.
func (b *Breaker) finish(ctx context.Context, t ticket, method string, err error) {
	if !t.track && t.unrecorded == "" {
		return
	}
	d := time.Since(t.start)
	class := Ignore
	// Our own rejection (from another Breaker further down the chain) says
	// nothing about the dependency.
	if !errors.Is(err, ErrOpen) {
		class = b.classify(ctx, method, err)
	}
	if class == Ignore {
		// An ignored probe is not settled: its lease frees the slot.
		return
	}
	if !t.track {
		b.tel.drop(t.scope, t.unrecorded, 1)
		return
	}
	if class == Failure && b.cache != nil {
		// A failure seen here may be the start of a trip: until the
		// coordinator answers again, this scope's admissions ask it, so
		// that a failing dependency is not fed from the cache while the
		// news of the trip travels.
		b.cache.suspect(t.scope)
	}
	it := item{
		scope:   t.scope,
		outcome: coordinator.Outcome{Generation: t.gen, Failure: class == Failure, Duration: d},
		caller:  trace.SpanContextFromContext(ctx),
	}
	if t.verdict == coordinator.Probe {
		it.claim = t.claim
	}
	b.rec.add(it)
}
