package main

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	testpb "google.golang.org/grpc/interop/grpc_testing"

	"github.com/cbgrpc/cbgrpc"
	"github.com/cbgrpc/cbgrpc/coordinator"
	"github.com/cbgrpc/cbgrpc/coordinator/memory"
)

const (
	otelgrpcScope = "go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	cbgrpcScope   = "github.com/cbgrpc/cbgrpc"
)

// A call the breaker rejects never reaches otelgrpc's stats handler; the
// span cbgrpc makes for it must be the one otelgrpc makes for a call of
// the same method that failed UNAVAILABLE: the same name, kind, status and
// attributes, keys and values. The only differences allowed are the
// rejection's own cbgrpc.* attributes. And cbgrpc's decision metric names
// the method and server as otelgrpc's rpc.client.call.duration does, so the
// two join. The target is an IP address: for a host name, otelgrpc v0.72
// says the address it connected to where cbgrpc says the name
// (docs/telemetry.md).
func TestRejectedCallSpanIsOtelgrpcs(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))

	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	dep := &dependency{}
	dep.failing.Store(true)
	testgrpc.RegisterTestServiceServer(srv, dep)
	go srv.Serve(lis)
	defer srv.Stop()

	policy := coordinator.DefaultPolicy()
	policy.MinCalls, policy.FailureRatio = 1, 0.5
	b, err := cbgrpc.New(memory.New(),
		cbgrpc.WithPolicy(policy),
		cbgrpc.WithRecordInterval(time.Millisecond),
		cbgrpc.WithTracerProvider(tp),
		cbgrpc.WithMeterProvider(mp))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	conn, err := grpc.NewClient(lis.Addr().String(),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithStatsHandler(otelgrpc.NewClientHandler(otelgrpc.WithTracerProvider(tp), otelgrpc.WithMeterProvider(mp))),
		grpc.WithUnaryInterceptor(b.UnaryClientInterceptor()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := testgrpc.NewTestServiceClient(conn)

	// Failing calls until the breaker opens, then the rejected one.
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, err := client.EmptyCall(context.Background(), &testpb.Empty{})
		if errors.Is(err, cbgrpc.ErrOpen) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the breaker did not open; last call: %v", err)
		}
		time.Sleep(time.Millisecond)
	}

	var theirs, ours sdktrace.ReadOnlySpan
	for _, s := range rec.Ended() {
		switch s.InstrumentationScope().Name {
		case otelgrpcScope:
			theirs = s
		case cbgrpcScope:
			if s.SpanKind() == trace.SpanKindClient {
				ours = s
			}
		}
	}
	if theirs == nil || ours == nil {
		t.Fatalf("otelgrpc's span %v, cbgrpc's rejected-call span %v; want both", theirs, ours)
	}
	if ours.Name() != theirs.Name() || ours.SpanKind() != theirs.SpanKind() {
		t.Errorf("rejected-call span %q, kind %v; otelgrpc's %q, kind %v", ours.Name(), ours.SpanKind(), theirs.Name(), theirs.SpanKind())
	}
	if ours.Status().Code != codes.Error || theirs.Status().Code != codes.Error {
		t.Errorf("status %v, otelgrpc's %v; want both errors", ours.Status(), theirs.Status())
	}
	want, got := attrMap(theirs.Attributes()), attrMap(ours.Attributes())
	for k := range got {
		if strings.HasPrefix(k, "cbgrpc.") {
			delete(got, k) // the rejection's own
		}
	}
	if !sameAttrs(got, want) {
		t.Errorf("rejected-call span's attributes, past cbgrpc.*:\n  %v\notelgrpc's for the failed call:\n  %v", got, want)
	}

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	durations := points(rm, otelgrpcScope, "rpc.client.call.duration")
	decisions := points(rm, cbgrpcScope, "cbgrpc.decisions")
	if len(durations) == 0 || len(decisions) == 0 {
		t.Fatalf("%d points of rpc.client.call.duration, %d of cbgrpc.decisions; want both", len(durations), len(decisions))
	}
	// What says which call it was; the status is the outcome's.
	join := attrMap(durations[0].ToSlice())
	delete(join, "rpc.response.status_code")
	delete(join, "error.type")
	for _, set := range decisions {
		kvs := attrMap(set.ToSlice())
		for k := range kvs {
			if strings.HasPrefix(k, "cbgrpc.") {
				delete(kvs, k)
			}
		}
		if !sameAttrs(kvs, join) {
			t.Errorf("cbgrpc.decisions point, past cbgrpc.*: %v\nrpc.client.call.duration's, past its status: %v", kvs, join)
		}
	}
}

func attrMap(kvs []attribute.KeyValue) map[string]string {
	m := make(map[string]string, len(kvs))
	for _, kv := range kvs {
		m[string(kv.Key)] = kv.Value.Type().String() + ":" + kv.Value.Emit()
	}
	return m
}

func sameAttrs(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// points returns the attribute sets of the points of the metric name of
// instrumentation scope.
func points(rm metricdata.ResourceMetrics, scope, name string) []attribute.Set {
	var sets []attribute.Set
	for _, sm := range rm.ScopeMetrics {
		if sm.Scope.Name != scope {
			continue
		}
		for _, m := range sm.Metrics {
			if m.Name != name {
				continue
			}
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					sets = append(sets, p.Attributes)
				}
			case metricdata.Histogram[float64]:
				for _, p := range d.DataPoints {
					sets = append(sets, p.Attributes)
				}
			}
		}
	}
	return sets
}
