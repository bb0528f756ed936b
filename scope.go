package cbgrpc

import (
	"context"
	"fmt"
	"strings"

	"go.opentelemetry.io/otel"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// ScopeFunc names the breaker that protects a call. target is the
// ClientConn's target as given to grpc.NewClient and method the full method
// name ("/package.Service/Method"). Calls with the same scope share one
// breaker fleet-wide, so a scope should name the dependency, not the
// replica. An empty scope means the call is not protected: it runs without
// admission and its outcome is not recorded.
//
// A ScopeFunc that panics does not crash the caller: the call is not sent
// and fails with status Internal naming the method and the panic, which
// also goes to the OpenTelemetry error handler (otel.Handle). Letting it
// through would send a call no breaker protects, and a scope function
// that panics on some calls is a bug best seen at once.
type ScopeFunc func(ctx context.Context, target, method string) string

// safeScopeOf runs the ScopeFunc, with a panic turned into the call's
// error.
func (b *Breaker) safeScopeOf(ctx context.Context, target, method string) (scope string, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = status.Error(codes.Internal, fmt.Sprintf("cbgrpc: the scope function panicked on %s (the call was not sent): %v", method, r))
			otel.Handle(err)
		}
	}()
	return b.cfg.scope(ctx, target, method), nil
}

// ScopeByMethod gives each method of each target its own breaker:
// "dns:///users:443/users.v1.Users/Get". It is the default: a failing method
// does not stop the healthy methods of the same service.
func ScopeByMethod(_ context.Context, target, method string) string {
	return target + method
}

// ScopeByService gives each service of each target one breaker:
// "dns:///users:443/users.v1.Users".
func ScopeByService(_ context.Context, target, method string) string {
	if i := strings.LastIndexByte(method, '/'); i > 0 {
		return target + method[:i]
	}
	return target + method
}

// ScopeByTarget gives each target one breaker, whatever the method.
func ScopeByTarget(_ context.Context, target, _ string) string {
	return target
}

// defaultExcluded are left out unless the user says otherwise: a health
// check answering NOT_SERVING is how a dependency is watched, and reflection
// is a tool's call, not traffic.
var defaultExcluded = []string{
	"/grpc.health.v1.Health/",
	"/grpc.reflection.v1.ServerReflection/",
	"/grpc.reflection.v1alpha.ServerReflection/",
}

// methodSet is a set of full methods and services ("/pkg.Service/"): the
// methods left out of the breaker, those a server's pushback counts for.
type methodSet map[string]struct{}

func (x methodSet) has(method string) bool {
	if len(x) == 0 {
		return false
	}
	if _, ok := x[method]; ok {
		return true
	}
	if i := strings.LastIndexByte(method, '/'); i > 0 {
		_, ok := x[method[:i+1]]
		return ok
	}
	return false
}
