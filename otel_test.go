package cbgrpc

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/cbgrpc/cbgrpc/coordinator"
)

// The tests read what a Breaker measured and traced through the
// OpenTelemetry SDK's own readers.

// metrics reads what a Breaker measured.
type metrics struct {
	reader *sdkmetric.ManualReader
	mp     *sdkmetric.MeterProvider
}

func newMetrics() *metrics {
	r := sdkmetric.NewManualReader()
	return &metrics{reader: r, mp: sdkmetric.NewMeterProvider(sdkmetric.WithReader(r))}
}

// collect returns every metric measured so far.
func (m *metrics) collect(t testing.TB) []metricdata.Metrics {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := m.reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	var all []metricdata.Metrics
	for _, sm := range rm.ScopeMetrics {
		all = append(all, sm.Metrics...)
	}
	return all
}

// states reads the cbgrpc.state gauge of a Breaker WithScopeInMetrics:
// the state of each scope it has points for, the one valued 1. A scope
// whose points are not one 1 and a 0 for every other state fails t.
func (m *metrics) states(t testing.TB) map[string]coordinator.State {
	t.Helper()
	states := make(map[string]coordinator.State)
	points := make(map[string]int)
	for _, dp := range m.statePoints(t) {
		scope := must(dp.Attributes.Value(attrScope)).AsString()
		points[scope]++
		if dp.Value == 1 {
			if had, ok := states[scope]; ok {
				t.Fatalf("cbgrpc.state: %q is both %v and %v", scope, had, stateNamed(t, dp.Attributes))
			}
			states[scope] = stateNamed(t, dp.Attributes)
		} else if dp.Value != 0 {
			t.Fatalf("cbgrpc.state of %q: %d, want 0 or 1", scope, dp.Value)
		}
	}
	for scope, n := range points {
		if _, ok := states[scope]; !ok || n != int(stateCount) {
			t.Fatalf("cbgrpc.state of %q: %d points, in state %v (%v); want one per state, one of them 1", scope, n, states[scope], ok)
		}
	}
	return states
}

// statePoints returns the points of the cbgrpc.state gauge.
func (m *metrics) statePoints(t testing.TB) []metricdata.DataPoint[int64] {
	t.Helper()
	var points []metricdata.DataPoint[int64]
	for _, mt := range m.collect(t) {
		if mt.Name != "cbgrpc.state" {
			continue
		}
		data, ok := mt.Data.(metricdata.Gauge[int64])
		if !ok {
			t.Fatalf("cbgrpc.state is %T, not an int64 gauge", mt.Data)
		}
		points = append(points, data.DataPoints...)
	}
	return points
}

// stateNamed returns the state a point's cbgrpc.state names.
func stateNamed(t testing.TB, set attribute.Set) coordinator.State {
	t.Helper()
	name := must(set.Value(attrState)).AsString()
	for s := range stateCount {
		if s.String() == name {
			return s
		}
	}
	t.Fatalf("cbgrpc.state = %q names no state", name)
	return 0
}

// drops names the outcomes dropped so far by reason, for a test whose
// count of delivered outcomes falls short.
func (m *metrics) drops(t testing.TB) string {
	t.Helper()
	var by []string
	for _, reason := range dropReasons {
		by = append(by, fmt.Sprintf("%d %s", m.sum(t, "cbgrpc.outcomes.dropped", attrReason.String(reason)), reason))
	}
	return strings.Join(by, ", ")
}

// sum adds up the counter name over the points whose attributes include
// every one of attrs.
func (m *metrics) sum(t testing.TB, name string, attrs ...attribute.KeyValue) int64 {
	t.Helper()
	var total int64
	for _, mt := range m.collect(t) {
		if mt.Name != name {
			continue
		}
		data, ok := mt.Data.(metricdata.Sum[int64])
		if !ok {
			t.Fatalf("%s is %T, not an int64 sum", name, mt.Data)
		}
	points:
		for _, dp := range data.DataPoints {
			for _, a := range attrs {
				if v, ok := dp.Attributes.Value(a.Key); !ok || v != a.Value {
					continue points
				}
			}
			total += dp.Value
		}
	}
	return total
}

// tracing records the spans of one tracer provider.
type tracing struct {
	rec *tracetest.SpanRecorder
	tp  *sdktrace.TracerProvider
}

func newTracing() *tracing {
	rec := tracetest.NewSpanRecorder()
	return &tracing{rec: rec, tp: sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))}
}

// transitions returns the ended transition spans from -> to.
func (tr *tracing) transitions(from, to coordinator.State) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range tr.rec.Ended() {
		if s.Name() != spanTransition {
			continue
		}
		var f, tt string
		for _, a := range s.Attributes() {
			switch a.Key {
			case attrFrom:
				f = a.Value.AsString()
			case attrTo:
				tt = a.Value.AsString()
			}
		}
		if f == from.String() && tt == to.String() {
			out = append(out, s)
		}
	}
	return out
}

// spans returns the ended spans named name.
func (tr *tracing) spans(name string) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range tr.rec.Ended() {
		if s.Name() == name {
			out = append(out, s)
		}
	}
	return out
}

// attr returns the value of a span's attribute key, and whether it has it.
func attr(s sdktrace.ReadOnlySpan, key attribute.Key) (attribute.Value, bool) {
	for _, a := range s.Attributes() {
		if a.Key == key {
			return a.Value, true
		}
	}
	return attribute.Value{}, false
}

// events returns the events named name of the ended spans.
func (tr *tracing) events(name string) []sdktrace.Event {
	var out []sdktrace.Event
	for _, s := range tr.rec.Ended() {
		for _, e := range s.Events() {
			if e.Name == name {
				out = append(out, e)
			}
		}
	}
	return out
}
