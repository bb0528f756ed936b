package cbgrpc

import (
	"context"
	"errors"
	"fmt"
	"os"
	"regexp"
	"strings"
	"sync"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
	testpb "google.golang.org/grpc/interop/grpc_testing"

	"github.com/cbgrpc/cbgrpc/coordinator"
	"github.com/cbgrpc/cbgrpc/coordinator/coordinatortest"
	"github.com/cbgrpc/cbgrpc/coordinator/memory"
)

// telemetryDoc is the page the README links for what shows in traces and
// metrics.
const telemetryDoc = "docs/telemetry.md"

// readmeTelemetry returns the page "What shows in traces and metrics"
// (telemetryDoc) and the cells of its metrics table, by metric name. An
// attribute a row describes "as above" takes the values of the rows above
// that name it.
func readmeTelemetry(t *testing.T) (section string, rows map[string][]string) {
	t.Helper()
	doc, err := os.ReadFile(telemetryDoc)
	if err != nil {
		t.Fatal(err)
	}
	section, ok := strings.CutPrefix(string(doc), "# What shows in traces and metrics\n")
	if !ok {
		t.Fatal(telemetryDoc + ` does not start with the title "What shows in traces and metrics"`)
	}
	if i := strings.Index(section, "\n#"); i >= 0 {
		section = section[:i]
	}
	rows = make(map[string][]string)
	var above []string // attribute cells, in order
	for _, line := range strings.Split(section, "\n") {
		if !strings.HasPrefix(line, "| `") {
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), "|")
		for i := range cells {
			cells[i] = strings.TrimSpace(cells[i])
		}
		if len(cells) != 3 {
			t.Fatalf(telemetryDoc+" metrics row %q has %d cells, want 3 (metric, instrument and unit, attributes)", line, len(cells))
		}
		own := cells[2]
		for _, m := range asAbove.FindAllStringSubmatch(own, -1) {
			for _, a := range above {
				if strings.Contains(a, "`"+m[1]+"`") {
					cells[2] += " " + a
				}
			}
		}
		above = append(above, own)
		rows[strings.Trim(cells[0], "`")] = cells
	}
	if len(rows) == 0 {
		t.Fatal(telemetryDoc + " lists no metric")
	}
	return section, rows
}

var asAbove = regexp.MustCompile("`([^`]+)` as above")

// kindWord is how telemetryDoc names an instrument kind.
func kindWord(k sdkmetric.InstrumentKind) string {
	switch k {
	case sdkmetric.InstrumentKindCounter, sdkmetric.InstrumentKindObservableCounter:
		return "counter"
	case sdkmetric.InstrumentKindUpDownCounter, sdkmetric.InstrumentKindObservableUpDownCounter:
		return "up-down counter"
	case sdkmetric.InstrumentKindHistogram:
		return "histogram"
	case sdkmetric.InstrumentKindGauge, sdkmetric.InstrumentKindObservableGauge:
		return "gauge"
	}
	return k.String()
}

// freeValues are attributes whose values are the user's: scopes, the
// Breaker's name, method names and servers.
var freeValues = map[attribute.Key]bool{attrScope: true, attrBreaker: true, semconv.RPCMethodKey: true, semconv.ServerAddressKey: true, semconv.ServerPortKey: true}

// The telemetry page the README links lists every metric the code
// creates, with its instrument and unit, every attribute its points carry
// and every value the code gives them, and no metric that does not exist;
// every span, event and attribute of the traces is named on the same page.
func TestREADMEListsEveryMetric(t *testing.T) {
	section, rows := readmeTelemetry(t)

	var mu sync.Mutex
	created := make(map[string]sdkmetric.Instrument)
	reader := sdkmetric.NewManualReader()
	mt := &metrics{reader: reader, mp: sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader),
		sdkmetric.WithView(func(i sdkmetric.Instrument) (sdkmetric.Stream, bool) {
			mu.Lock()
			defer mu.Unlock()
			created[i.Name] = i
			return sdkmetric.Stream{}, false
		}))}
	tr := newTracing()

	// A life that gives every metric a point: the feed cannot be opened,
	// a call succeeds, one fails and trips the breaker, one is rejected;
	// then the coordinator fails, and a call of another method is let
	// through by the failure policy.
	clk := coordinatortest.NewClock()
	fc := newTestCoordinator(t, memory.New(memory.WithClock(clk.Now))).withFeed()
	fc.refuse.Store(true)
	b := newBreaker(t, fc, WithPolicy(tripPolicy()), WithMeterProvider(mt.mp), WithTracerProvider(tr.tp), WithName("orders"))
	calls := newTracedCalls(t, b, tr)
	calls.call("ok", false)
	calls.call("fails", true)
	eventually(t, "the trip", func() bool { return len(tr.transitions(closed, open)) == 1 })
	if _, err := calls.call("rejected", false); !errors.Is(err, ErrOpen) {
		t.Fatalf("call while open: %v", err)
	}
	fc.set(modeFail)
	if _, err := calls.client.UnaryCall(context.Background(), &testpb.SimpleRequest{}); err != nil {
		t.Fatalf("call with the coordinator down, fail-open: %v", err)
	}
	eventually(t, "the feed's failure", func() bool { return mt.sum(t, "cbgrpc.feed.losses") > 0 })

	mu.Lock()
	defer mu.Unlock()
	for name, inst := range created {
		cells, ok := rows[name]
		if !ok {
			t.Errorf("the code creates %s; "+telemetryDoc+" does not list it", name)
			continue
		}
		if want := fmt.Sprintf("%s, `%s`", kindWord(inst.Kind), inst.Unit); cells[1] != want {
			t.Errorf(telemetryDoc+": %s is %q; the code makes %q", name, cells[1], want)
		}
	}
	for name := range rows {
		if _, ok := created[name]; !ok {
			t.Errorf(telemetryDoc+" lists %s; the code creates no such instrument", name)
		}
	}

	documented := func(row []string, s string) bool { return strings.Contains(row[2], "`"+s+"`") }
	lacks := make(map[string]bool) // each once, however many points show it
	for _, m := range mt.collect(t) {
		row, ok := rows[m.Name]
		if !ok {
			continue
		}
		for _, set := range pointAttributes(t, m) {
			for _, kv := range set.ToSlice() {
				// Every metric carries the Breaker's name: said once, above the table.
				if kv.Key == attrBreaker && strings.Contains(section, "`cbgrpc.breaker`") {
					continue
				}
				if !documented(row, string(kv.Key)) {
					lacks[fmt.Sprintf("%s lacks the attribute %s", m.Name, kv.Key)] = true
				}
				if kv.Value.Type() == attribute.STRING && !freeValues[kv.Key] && !documented(row, kv.Value.AsString()) {
					lacks[fmt.Sprintf("%s lacks the value %q of %s", m.Name, kv.Value.AsString(), kv.Key)] = true
				}
			}
		}
	}
	for msg := range lacks {
		t.Errorf(telemetryDoc+": %s", msg)
	}

	// Every value the code can give, seen above or not.
	want := map[string][]string{
		"cbgrpc.decisions":            {"grpc", "_OTHER"},
		"cbgrpc.transitions":          nil,
		"cbgrpc.outcomes.dropped":     {dropQueueFull, dropCoordinator, dropBackoff, dropClosed, dropUnadmitted},
		"cbgrpc.coordinator.duration": nil,
		"cbgrpc.coordinator.errors":   nil,
		"cbgrpc.feed.losses":          nil,
		"cbgrpc.state":                nil,
	}
	for v := coordinator.Allow; v <= coordinator.Reject; v++ {
		want["cbgrpc.decisions"] = append(want["cbgrpc.decisions"], v.String())
	}
	for by := range deciders {
		want["cbgrpc.decisions"] = append(want["cbgrpc.decisions"], by.String())
	}
	for s := closed; s <= disabled; s++ {
		want["cbgrpc.transitions"] = append(want["cbgrpc.transitions"], s.String())
		want["cbgrpc.state"] = append(want["cbgrpc.state"], s.String())
	}
	for op := range b.tel.plainOps {
		want["cbgrpc.coordinator.duration"] = append(want["cbgrpc.coordinator.duration"], op)
	}
	errs := []error{context.DeadlineExceeded, context.Canceled, coordinator.ErrInvalidPolicy, coordinator.ErrCorruptState, errTransport}
	for _, kind := range []string{coordinator.KindUnreachable, coordinator.KindTimeout, coordinator.KindAuth, coordinator.KindPermission,
		coordinator.KindReadOnly, coordinator.KindLoading, coordinator.KindScript} {
		errs = append(errs, &kindError{kind: kind, err: errTransport})
	}
	for _, err := range errs {
		want["cbgrpc.coordinator.errors"] = append(want["cbgrpc.coordinator.errors"], errorKind(err))
		want["cbgrpc.feed.losses"] = append(want["cbgrpc.feed.losses"], errorKind(err))
	}
	for name, values := range want {
		for _, v := range values {
			if row, ok := rows[name]; ok && !documented(row, v) {
				t.Errorf(telemetryDoc+": %s lacks the value %q", name, v)
			}
		}
	}

	// Traces: span and event names, and attribute keys.
	named := func(s string) bool { return strings.Contains(section, "`"+s+"`") }
	for _, s := range tr.rec.Ended() {
		if s.InstrumentationScope().Name == instrumentationName {
			if s.SpanKind() == trace.SpanKindClient && !named("pkg.Service/Method") || s.SpanKind() != trace.SpanKindClient && !named(s.Name()) {
				t.Errorf(telemetryDoc+": no span named like %q", s.Name())
			}
			for _, kv := range s.Attributes() {
				if !named(string(kv.Key)) {
					t.Errorf(telemetryDoc+": span %s has the attribute %s, which it does not name", s.Name(), kv.Key)
				}
			}
		}
		for _, e := range s.Events() {
			if !named(e.Name) {
				t.Errorf(telemetryDoc+": no event %s", e.Name)
			}
			for _, kv := range e.Attributes {
				if !named(string(kv.Key)) {
					t.Errorf(telemetryDoc+": event %s has the attribute %s, which it does not name", e.Name, kv.Key)
				}
			}
		}
	}
}

// pointAttributes returns the attribute sets of a metric's points.
func pointAttributes(t *testing.T, m metricdata.Metrics) []attribute.Set {
	var sets []attribute.Set
	switch data := m.Data.(type) {
	case metricdata.Sum[int64]:
		for _, dp := range data.DataPoints {
			sets = append(sets, dp.Attributes)
		}
	case metricdata.Gauge[int64]:
		for _, dp := range data.DataPoints {
			sets = append(sets, dp.Attributes)
		}
	case metricdata.Histogram[float64]:
		for _, dp := range data.DataPoints {
			sets = append(sets, dp.Attributes)
		}
	default:
		t.Errorf("%s: points of %T not read", m.Name, m.Data)
	}
	return sets
}
