package cbgrpc

import (
	"context"
	"fmt"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/cbgrpc/cbgrpc/coordinator/memory"
	"github.com/cbgrpc/cbgrpc/internal/instant"
)

func TestRouteKeepsTheScopeOfABuiltInScopeFunc(t *testing.T) {
	b := newBreaker(t, memory.New(), WithScope(ScopeByService))
	c, err := routeOf(b, context.Background(), conn(t, "dns:///users"), "/users.v1.Users/Get", nil)
	if err != nil || c.scope != "dns:///users/users.v1.Users" || c.slot == nil {
		t.Fatalf("route = %+v, %v; want the service's scope and a row kept by the route", c, err)
	}
	if c, _ := routeOf(b, context.Background(), conn(t, "dns:///users"), "/grpc.health.v1.Health/Check", nil); c.scope != "" {
		t.Fatalf("the health service's scope = %q, want it left out", c.scope)
	}
}

type scopeKey struct{}

func TestRouteRunsAScopeFuncOfItsOwnForEachCall(t *testing.T) {
	byTenant := func(ctx context.Context, target, method string) string {
		tenant, _ := ctx.Value(scopeKey{}).(string)
		return tenant + method
	}
	b := newBreaker(t, memory.New(), WithScope(byTenant))
	for _, tenant := range []string{"a", "b"} {
		ctx := context.WithValue(context.Background(), scopeKey{}, tenant)
		c, err := routeOf(b, ctx, conn(t, "t"), "/s/M", nil)
		if err != nil || c.scope != tenant+"/s/M" || c.slot != nil {
			t.Fatalf("tenant %s: route = %+v, %v; want its own scope, found each call", tenant, c, err)
		}
	}
}

func TestRouteFindsTheRowAgainOnceTheTableForgotIt(t *testing.T) {
	b := newBreaker(t, memory.New())
	c, _ := routeOf(b, context.Background(), conn(t, "t"), "/s/M", nil)
	_, first := b.known.useRow(c.slot, c.scope, instant.Now())
	if c.slot.Load() != first {
		t.Fatal("the route does not keep the row it found")
	}
	if n := b.known.forget(instant.Now().Add(2 * b.known.idle)); n != 1 {
		t.Fatalf("forget dropped %d rows, want 1", n)
	}
	_, again := b.known.useRow(c.slot, c.scope, instant.Now())
	if again == first || c.slot.Load() != again {
		t.Fatal("after the table forgot the scope, the route still serves the dropped row")
	}
	if v, ok := b.known.index.Load(c.scope); !ok || v.(*known) != again {
		t.Fatal("the row the route found is not the table's")
	}
}

func TestRoutesPastTheirBoundStillDecide(t *testing.T) {
	b := newBreaker(t, memory.New())
	cc := conn(t, "t")
	for i := range maxRoutes + 10 {
		method := fmt.Sprintf("/s/M%d", i)
		if c, err := routeOf(b, context.Background(), cc, method, nil); err != nil || c.scope != "t"+method {
			t.Fatalf("route %d = %+v, %v", i, c, err)
		}
	}
	n := 0
	for _, trs := range *b.routes.known.Load() {
		n += len(trs)
	}
	if n != maxRoutes {
		t.Fatalf("%d routes remembered, want the bound, %d", n, maxRoutes)
	}
}

// One method on two targets: two routes, each its target's scope.
func TestRoutesOfOneMethodOnTwoTargets(t *testing.T) {
	b := newBreaker(t, memory.New())
	for range 2 {
		for _, target := range []string{"a", "b"} {
			if c, err := routeOf(b, context.Background(), conn(t, target), "/s/M", nil); err != nil || c.scope != target+"/s/M" {
				t.Fatalf("route of /s/M on %s = %+v, %v; want the scope %s/s/M", target, c, err, target)
			}
		}
	}
	if trs := (*b.routes.known.Load())["/s/M"]; len(trs) != 2 {
		t.Fatalf("/s/M has %d routes, want one per target", len(trs))
	}
}

// conn is a ClientConn of target that is never used to send.
func conn(t *testing.T, target string) *grpc.ClientConn {
	t.Helper()
	cc, err := grpc.NewClient(target, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return cc
}

// routeOf is route as the tests read it: the call returned.
func routeOf(b *Breaker, ctx context.Context, cc *grpc.ClientConn, method string, opts []grpc.CallOption) (call, error) {
	var c call
	err := b.route(ctx, &c, cc, method, opts)
	return c, err
}
