package cbgrpc

import (
	"context"
	"strings"
)

// ScopeFunc names the breaker that protects a call. target is the
// ClientConn's target as given to grpc.NewClient and method the full method
// name ("/package.Service/Method"). Calls with the same scope share one
// breaker fleet-wide, so a scope should name the dependency, not the
// replica. An empty scope means the call is not protected: it runs without
// admission and its outcome is not recorded.
type ScopeFunc func(ctx context.Context, target, method string) string

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

// excluded is a set of full methods and services ("/pkg.Service/").
type excluded map[string]struct{}

func (x excluded) has(method string) bool {
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
