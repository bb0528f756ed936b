package cbgrpc

import (
	"context"
	"fmt"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/cbgrpc/cbgrpc/coordinator/memory"
)

// Past maxMethods, methods made at run time share one set of attributes
// in metrics: the decision metric's time series stay bounded. Their spans
// still name them.
func TestDecisionMethodsAreBounded(t *testing.T) {
	b := newBreaker(t, memory.New())
	cc, ms := conn(t, "t"), &b.tel.methods
	get := func(method string) *rpcMethod {
		c, err := routeOf(b, context.Background(), cc, method, nil)
		if err != nil {
			t.Fatal(err)
		}
		return c.rpc
	}
	for i := range maxMethods {
		if m := get(fmt.Sprintf("/svc.S/M%d", i)); m.rpcMetrics == ms.other {
			t.Fatalf("method %d of %d read _OTHER", i, maxMethods)
		}
	}
	if get("/svc.S/M0").rpcMetrics == ms.other {
		t.Error("a known method read _OTHER")
	}
	m := get("/svc.S/OneTooMany")
	if m.rpcMetrics != ms.other {
		t.Fatalf("method %d has attributes %v, want _OTHER", maxMethods+1, m.attrs)
	}
	if set := attribute.NewSet(m.attrs...); must(set.Value(semconv.RPCMethodKey)).AsString() != "_OTHER" {
		t.Errorf("attributes %v, want rpc.method _OTHER", m.attrs)
	}
	if set := attribute.NewSet(m.span...); m.name != "svc.S/OneTooMany" || must(set.Value(semconv.RPCMethodKey)).AsString() != "svc.S/OneTooMany" {
		t.Errorf("span %q %v, want the method's own name", m.name, m.span)
	}
}

// rpcAttrs reads a full method as otelgrpc does: rpc.method is service
// and method.
func TestRPCAttributes(t *testing.T) {
	for _, c := range []struct {
		full, name, method string
	}{
		{"/grpc.testing.TestService/EmptyCall", "grpc.testing.TestService/EmptyCall", "grpc.testing.TestService/EmptyCall"},
		{"/pkg.v1.Svc/", "pkg.v1.Svc/", "pkg.v1.Svc/"},
		{"/NoService", "NoService", "NoService"},
		{"no/slash", "no/slash", ""},
	} {
		name, kvs := rpcAttrs(c.full)
		set := attribute.NewSet(kvs...)
		method, _ := set.Value(semconv.RPCMethodKey)
		system, _ := set.Value(semconv.RPCSystemNameKey)
		if name != c.name || method.AsString() != c.method || system.AsString() != "grpc" {
			t.Errorf("%q: %q %v; want name %q, method %q", c.full, name, kvs, c.name, c.method)
		}
	}
}

// server.address and server.port come from a ClientConn's canonical
// target, read as otelgrpc reads a dial target.
func TestServerAttributesOfATarget(t *testing.T) {
	for _, c := range []struct {
		target, address string
		port            int // 0: none
	}{
		{"127.0.0.1:7777", "127.0.0.1", 7777},
		{"passthrough:///127.0.0.1:7777", "127.0.0.1", 7777},
		{"dns:///api.example.com:443", "api.example.com", 443},
		{"dns://8.8.8.8/api.example.com:443", "api.example.com", 443},
		{"dns:///[::1]:50051", "::1", 50051},
		{"dns:///api.example.com", "api.example.com", 0},
		{"dns:///api.example.com:https", "api.example.com", 0},
		{"unix:///run/api.sock", "/run/api.sock", 0},
		{"unix:relative.sock", "relative.sock", 0},
		{"dns:///", "dns:///", 0},
	} {
		set := attribute.NewSet(serverAttrs(c.target)...)
		address, _ := set.Value(semconv.ServerAddressKey)
		port, hasPort := set.Value(semconv.ServerPortKey)
		if address.AsString() != c.address || hasPort != (c.port != 0) || int(port.AsInt64()) != c.port {
			t.Errorf("%q: %v; want address %q, port %d", c.target, set.ToSlice(), c.address, c.port)
		}
	}
}

// The attributes come from the ClientConn's canonical target, not from
// the target as the user wrote it.
func TestServerAttributesOfAClientConn(t *testing.T) {
	cc, err := grpc.NewClient("localhost:50051", grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	var ms rpcMethods
	ms.init(nil)
	m := ms.describe(cc, "/svc.S/M", true)
	want := attribute.NewSet(semconv.RPCMethodKey.String("svc.S/M"), semconv.RPCSystemNameKey.String("grpc"),
		semconv.ServerAddressKey.String("localhost"), semconv.ServerPortKey.Int(50051))
	if got := attribute.NewSet(m.span...); !got.Equals(&want) {
		t.Errorf("span attributes %v, want %v (canonical target %q)", got.ToSlice(), want.ToSlice(), cc.CanonicalTarget())
	}
	if got := attribute.NewSet(m.attrs...); !got.Equals(&want) {
		t.Errorf("metric attributes %v, want %v", got.ToSlice(), want.ToSlice())
	}
}
