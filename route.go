package cbgrpc

import (
	"context"
	"maps"
	"reflect"
	"sync"
	"sync/atomic"
)

// routes remembers, for each target and method a Breaker meets, what its
// calls share before their own options are read: whether the method is
// left out, the scope (when the ScopeFunc depends on target and method
// alone, as the built-in ones do), the scope's row of the table, and the
// calls' attributes in telemetry. A call then finds all four with one
// lookup instead of running the exclusions, the ScopeFunc, the table's
// index and telemetry's each time.
type routes struct {
	// known holds the routes by method, then by target: a process calls
	// a method on few targets, so a call hashes its method alone and
	// compares targets, which are mostly the same string as last time
	// (cc.Target()). It is copied on write: every call reads it, without
	// a lock, and a process meets a new method or ClientConn rarely.
	known atomic.Pointer[map[string][]targetRoute]
	mu    sync.Mutex // serialises writers
	n     int        // the routes known, under mu
	// fixed: the scope of a call follows from its target and method.
	fixed bool
}

// targetRoute is the route of a method on one target.
type targetRoute struct {
	target string
	r      *route
}

// route is what the calls of one target and method share.
type route struct {
	excluded bool
	// scope is the calls' scope when the ScopeFunc is fixed; "" when it
	// runs for each call.
	scope string
	// row is the scope's row of the table, as last found (nil: not yet);
	// the table may have dropped it since (knowledge.useRow).
	row atomic.Pointer[known]
	rpc *rpcMethod // the calls' attributes in telemetry (semconv.go)
}

// maxRoutes bounds the routes remembered: past it (a process that makes
// up method names or ClientConns without end), calls find their route
// anew each time.
const maxRoutes = 4096

// newRoutes returns the routes of a Breaker whose ScopeFunc is scope.
func newRoutes(scope ScopeFunc) *routes {
	rs := &routes{fixed: fixedScope(scope)}
	rs.known.Store(&map[string][]targetRoute{})
	return rs
}

// fixedScope reports whether f is one of the built-in ScopeFuncs, which
// read neither the context nor anything but target and method.
func fixedScope(f ScopeFunc) bool {
	p := reflect.ValueOf(f).Pointer()
	for _, g := range []ScopeFunc{ScopeByMethod, ScopeByService, ScopeByTarget} {
		if reflect.ValueOf(g).Pointer() == p {
			return true
		}
	}
	return false
}

// get returns the route of target and method; nil: none yet.
func (rs *routes) get(target, method string) *route {
	return find((*rs.known.Load())[method], target)
}

// find returns the route of target among trs; nil: none.
func find(trs []targetRoute, target string) *route {
	for _, tr := range trs {
		if tr.target == target {
			return tr.r
		}
	}
	return nil
}

// add returns the route of target and method, made by mk unless
// another was added meanwhile, and remembers it while fewer than
// maxRoutes are (remembered, which mk is told).
func (rs *routes) add(target, method string, mk func(remembered bool) *route) *route {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	old := *rs.known.Load()
	if had := find(old[method], target); had != nil {
		return had
	}
	if rs.n >= maxRoutes {
		return mk(false)
	}
	r := mk(true)
	next := maps.Clone(old)
	trs := old[method]
	next[method] = append(trs[:len(trs):len(trs)], targetRoute{target: target, r: r})
	rs.known.Store(&next)
	rs.n++
	return r
}

// newRoute is the route of target and method under cfg, whose calls
// telemetry names with rpc: with a fixed ScopeFunc, a method whose scope
// is "" is left out like an excluded one.
func (rs *routes) newRoute(cfg *config, target, method string, rpc *rpcMethod) *route {
	r := &route{excluded: cfg.excluded.has(method), rpc: rpc}
	if rs.fixed && !r.excluded {
		r.scope = cfg.scope(context.Background(), target, method)
		r.excluded = r.scope == ""
	}
	return r
}
