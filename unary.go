package cbgrpc

import (
	"context"
	"runtime"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/cbgrpc/cbgrpc/coordinator"
)

// Unary returns the unary client interceptor of a Breaker over c, for the
// dial-option one-liner. Without options, Unary(c) and [Stream](c) share
// one Breaker of c while either interceptor is in use; with options, each
// call makes a Breaker of its own. A Breaker a one-liner made is closed,
// and its goroutines end, once none of its interceptors is reachable any
// more (the connection holding them closed and dropped), after a garbage
// collection. It panics with a message naming the option when an option
// cannot work; use [New] to get the error instead, to share a Breaker
// with options, and to Close it yourself.
func Unary(c coordinator.Coordinator, opts ...Option) grpc.UnaryClientInterceptor {
	o := oneLinerOf("Unary", c, opts)
	call := o.b.UnaryClientInterceptor()
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		err := call(ctx, method, req, reply, cc, invoker, opts...)
		runtime.KeepAlive(o) // in use while this interceptor is
		return err
	}
}

// UnaryClientInterceptor returns the interceptor that protects unary calls:
// admit, invoke, classify, then record the outcome (or settle the probe) in
// the background. A rejected call returns an error matching [ErrOpen]
// without reaching the network, or what the fallback makes of it
// ([WithFallback]). Per-call options ([CallScope], [Unprotected],
// [CallClassifier]) change how one call is treated.
func (b *Breaker) UnaryClientInterceptor() grpc.UnaryClientInterceptor {
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		var c call
		if err := b.route(ctx, &c, cc, method, opts); err != nil {
			return err
		}
		if c.scope == "" {
			return invoker(ctx, method, req, reply, cc, opts...)
		}
		if err := b.letThrough(&c, b.admit(ctx, &c)); err != nil {
			return b.rejected(ctx, method, req, reply, err)
		}
		if b.cfg.pushback == nil {
			err := invoker(ctx, method, req, reply, cc, opts...)
			return b.failed(ctx, method, req, reply, err, b.finish(ctx, &c, err))
		}
		// Apart: the trailer, whose address gRPC takes, is an allocation.
		var trailer metadata.MD
		// A copy: appending to the caller's slice could write into its
		// spare capacity.
		opts = append(opts[:len(opts):len(opts)], grpc.Trailer(&trailer))
		err := invoker(ctx, method, req, reply, cc, opts...)
		class := b.finish(ctx, &c, err)
		b.pushedBack(ctx, c, err, trailer)
		return b.failed(ctx, method, req, reply, err, class)
	}
}

func target(cc *grpc.ClientConn) string {
	if cc == nil {
		return ""
	}
	return cc.Target()
}
