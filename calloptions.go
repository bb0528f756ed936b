package cbgrpc

import (
	"context"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// CallScope puts one call, unary or stream, in the breaker named scope,
// instead of the one [WithScope] would choose, and protects it even if its
// method is left out by [WithExcludedMethods]. The scope is used as it is
// (not joined to the target), so calls of any method or ClientConn that
// name the same scope share one breaker fleet-wide.
//
// CallScope, [Unprotected] and [CallClassifier] are grpc.CallOptions that a
// Breaker's interceptors read and gRPC ignores (they embed
// grpc.EmptyCallOption and are passed on down the chain untouched, so
// every Breaker of a chain reads them). They work however the Breaker was
// made ([New], [Unary], [Stream]). Give them to a call, or to
// grpc.WithDefaultCallOptions for every call of a ClientConn. Of several
// options of one kind the last wins, so an option given to a call
// overrides a ClientConn's default (gRPC puts the defaults first).
//
// CallScope("") is a bad option, as is CallClassifier(nil): the call fails
// with status InvalidArgument naming the option, before anything is sent
// or asked of the coordinator. To run a call outside the breaker, use
// [Unprotected].
func CallScope(scope string) grpc.CallOption {
	return scopeOption{scope: scope}
}

// Unprotected runs one call, unary or stream, outside the breaker: it is
// neither admitted nor rejected, never reaches the coordinator, its outcome
// is not counted, and no fallback ([WithFallback]) serves it. For calls
// that must go through while their dependency's breaker is open: an
// administrator's command, a readiness check. It wins over [CallScope];
// see CallScope for how per-call options combine.
func Unprotected() grpc.CallOption {
	return unprotectedOption{}
}

// CallClassifier classifies the outcome of one call, unary or stream, with
// c instead of the Breaker's classifier ([WithClassifier]). A panic of c is
// contained as [Classifier] says. Under [WithFallbackOnFailures], c also
// decides which failures of the call the fallback serves.
// CallClassifier(nil) fails the call with status InvalidArgument; see
// [CallScope] for how per-call options combine.
func CallClassifier(c Classifier) grpc.CallOption {
	return classifierOption{classifier: c}
}

type scopeOption struct {
	grpc.EmptyCallOption
	scope string
}

type unprotectedOption struct{ grpc.EmptyCallOption }

type classifierOption struct {
	grpc.EmptyCallOption
	classifier Classifier
}

// callOptions are the per-call options of one call: the last of each
// kind, since gRPC puts a ClientConn's defaults first.
type callOptions struct {
	scope         string
	hasScope      bool
	classifier    Classifier
	hasClassifier bool
	unprotected   bool
}

func readCallOptions(opts []grpc.CallOption) callOptions {
	var o callOptions
	for _, opt := range opts {
		switch opt := opt.(type) {
		case scopeOption:
			o.scope, o.hasScope = opt.scope, true
		case classifierOption:
			o.classifier, o.hasClassifier = opt.classifier, true
		case unprotectedOption:
			o.unprotected = true
		}
	}
	return o
}

// route reads a call's options and writes into c, a new call, what the
// pipeline takes: its scope (left "" when it runs unprotected), method,
// classifier (nil: the Breaker's) and attributes in telemetry. A bad
// option, and a panic of the ScopeFunc, are the call's error.
func (b *Breaker) route(ctx context.Context, c *call, cc *grpc.ClientConn, method string, opts []grpc.CallOption) error {
	var o callOptions
	if len(opts) > 0 {
		o = readCallOptions(opts)
	}
	if o.hasScope && o.scope == "" {
		return status.Errorf(codes.InvalidArgument, "cbgrpc: CallScope: empty scope for %s (the call was not sent); use cbgrpc.Unprotected() to run a call outside the breaker", method)
	}
	if o.hasClassifier && o.classifier == nil {
		return status.Errorf(codes.InvalidArgument, "cbgrpc: CallClassifier: nil classifier for %s (the call was not sent)", method)
	}
	if o.unprotected {
		return nil
	}
	target := target(cc)
	r := b.routes.get(target, method)
	if r == nil {
		r = b.routes.add(target, method, func(remembered bool) *route {
			return b.routes.newRoute(&b.cfg, target, method, b.tel.methods.describe(cc, method, remembered))
		})
	}
	c.method, c.classifier, c.rpc = method, o.classifier, r.rpc
	switch {
	case o.hasScope:
		// Its own scope, whose row is not the route's.
		c.scope = o.scope
		return nil
	case r.excluded:
		return nil
	case r.scope != "":
		c.scope, c.slot = r.scope, &r.row
		return nil
	}
	scope, err := b.safeScopeOf(ctx, target, method)
	c.scope = scope
	return err
}
