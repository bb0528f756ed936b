package main

import (
	"bytes"
	"context"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
)

// collector is an OTLP/gRPC trace collector: it keeps every span it is
// sent, with the service.name of its resource.
type collector struct {
	coltracepb.UnimplementedTraceServiceServer
	mu    sync.Mutex
	spans []span
}

// span is a received span, its IDs in hex and its attributes as strings.
type span struct {
	service, name, trace, id, parent string
	attrs                            map[string]string
	status                           tracepb.Status_StatusCode
	links                            []string // the spans it links to, trace/span
}

func (s span) String() string {
	keys := make([]string, 0, len(s.attrs))
	for k := range s.attrs {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var kvs []string
	for _, k := range keys {
		kvs = append(kvs, k+"="+s.attrs[k])
	}
	parent := s.parent
	if parent == "" {
		parent = "none (root)"
	}
	text := fmt.Sprintf("%s  trace %s  span %s  parent %s  status %s\n      %s",
		s.name, s.trace, s.id, parent, s.status, strings.Join(kvs, " "))
	if len(s.links) > 0 {
		text += "\n      links: " + strings.Join(s.links, " ")
	}
	return text
}

func attrs(kvs []*commonpb.KeyValue) map[string]string {
	m := make(map[string]string, len(kvs))
	for _, kv := range kvs {
		switch v := kv.GetValue().GetValue().(type) {
		case *commonpb.AnyValue_StringValue:
			m[kv.GetKey()] = v.StringValue
		case *commonpb.AnyValue_IntValue:
			m[kv.GetKey()] = strconv.FormatInt(v.IntValue, 10)
		default:
			m[kv.GetKey()] = fmt.Sprint(kv.GetValue())
		}
	}
	return m
}

func (c *collector) Export(_ context.Context, req *coltracepb.ExportTraceServiceRequest) (*coltracepb.ExportTraceServiceResponse, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, rs := range req.GetResourceSpans() {
		service := attrs(rs.GetResource().GetAttributes())["service.name"]
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				var links []string
				for _, l := range s.GetLinks() {
					links = append(links, hex.EncodeToString(l.GetTraceId())+"/"+hex.EncodeToString(l.GetSpanId()))
				}
				c.spans = append(c.spans, span{
					links:   links,
					service: service,
					name:    s.GetName(),
					trace:   hex.EncodeToString(s.GetTraceId()),
					id:      hex.EncodeToString(s.GetSpanId()),
					parent:  hex.EncodeToString(s.GetParentSpanId()),
					attrs:   attrs(s.GetAttributes()),
					status:  s.GetStatus().GetCode(),
				})
			}
		}
	}
	return &coltracepb.ExportTraceServiceResponse{}, nil
}

// startCollector serves a collector on a free loopback port.
func startCollector(t *testing.T) (*collector, string) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c := &collector{}
	srv := grpc.NewServer()
	coltracepb.RegisterTraceServiceServer(srv, c)
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	return c, lis.Addr().String()
}

// The example, run against a real OTLP/gRPC collector and scraped over
// HTTP as Prometheus does: the collector gets every transition in the
// trace of the request that caused it, and the scrape parses into the
// breaker's counters and state gauge.
func TestOTelExportsToCollectorAndPrometheus(t *testing.T) {
	col, otlp := startCollector(t)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	var scrape []byte
	// The Breaker counts a transition as its notifier delivers it, after
	// the span the scenario waits for: scrape until the recovery is counted.
	recovered := regexp.MustCompile(`cbgrpc_transitions_total\{[^}]*cbgrpc_state_from="half-open"[^}]*cbgrpc_state_to="closed"`)
	err = run(&out, otlp, lis, func(url string) {
		for deadline := time.Now().Add(2 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			resp, err := http.Get(url)
			if err != nil {
				t.Errorf("scrape %s: %v", url, err)
				return
			}
			scrape, err = io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil {
				t.Errorf("scrape %s: %v", url, err)
				return
			}
			if recovered.Match(scrape) || time.Now().After(deadline) {
				return
			}
		}
	})
	if err != nil {
		t.Fatalf("run: %v\n%s", err, &out)
	}

	t.Run("OTLP", func(t *testing.T) {
		col.mu.Lock()
		defer col.mu.Unlock()
		byID := map[string]span{}
		for _, s := range col.spans {
			byID[s.id] = s
		}
		seen := map[string]bool{}
		for _, s := range col.spans {
			if s.name != "cbgrpc.transition" {
				continue
			}
			transition := s.attrs["cbgrpc.state.from"] + " -> " + s.attrs["cbgrpc.state.to"]
			seen[transition] = true
			if s.service != serviceName || s.attrs["cbgrpc.scope"] != scope {
				t.Errorf("%s: service %q, scope %q; want %q, %q", transition, s.service, s.attrs["cbgrpc.scope"], serviceName, scope)
			}
			parent, ok := byID[s.parent]
			if !ok || parent.name != requestSpan || parent.trace != s.trace {
				t.Errorf("%s: parent %q (%v); want the %q span of its trace %s", transition, s.parent, parent, requestSpan, s.trace)
				continue
			}
			if transition != "closed -> open" {
				continue
			}
			if parent.status != tracepb.Status_STATUS_CODE_ERROR {
				t.Errorf("the trip's request %v; want a failed request", parent)
			}
			var trace []string
			for _, in := range col.spans {
				if in.trace == s.trace {
					trace = append(trace, in.String())
				}
			}
			t.Logf("the trace of the request that tripped the breaker, as the collector received it:\n  %s", strings.Join(trace, "\n  "))
		}
		for _, want := range []string{"closed -> open", "open -> half-open", "half-open -> closed"} {
			if !seen[want] {
				t.Errorf("the collector got no %s transition span; got %v (%d spans in all)\n%s", want, seen, len(col.spans), &out)
			}
		}
	})

	t.Run("Prometheus", func(t *testing.T) {
		parser := expfmt.NewTextParser(model.UTF8Validation)
		families, err := parser.TextToMetricFamilies(bytes.NewReader(scrape))
		if err != nil {
			t.Fatalf("parse the scrape: %v\n%s", err, scrape)
		}
		// value returns the sum of the series of a family of type typ
		// whose labels include those given.
		value := func(name string, typ dto.MetricType, labels ...string) float64 {
			f, ok := families[name]
			if !ok {
				t.Errorf("no %s in the scrape", name)
				return 0
			}
			if f.GetType() != typ {
				t.Errorf("%s is a %v, want a %v", name, f.GetType(), typ)
			}
			var sum float64
		series:
			for _, m := range f.GetMetric() {
				have := map[string]string{}
				for _, l := range m.GetLabel() {
					have[l.GetName()] = l.GetValue()
				}
				for i := 0; i+1 < len(labels); i += 2 {
					if have[labels[i]] != labels[i+1] {
						continue series
					}
				}
				sum += m.GetCounter().GetValue() + m.GetGauge().GetValue()
			}
			return sum
		}
		for _, c := range []struct {
			name   string
			typ    dto.MetricType
			labels []string
			min    float64
			max    float64 // 0: no maximum
		}{
			{"cbgrpc_decisions_total", dto.MetricType_COUNTER, []string{"cbgrpc_verdict", "allow", "rpc_method", "grpc.testing.TestService/EmptyCall"}, 1, 0},
			{"cbgrpc_decisions_total", dto.MetricType_COUNTER, []string{"cbgrpc_verdict", "reject"}, 1, 0},
			{"cbgrpc_decisions_total", dto.MetricType_COUNTER, []string{"cbgrpc_verdict", "probe"}, 1, 0},
			// The replica that caused a transition counts it caused; the
			// others count it as they heard it, the trip long before the
			// scrape.
			{"cbgrpc_transitions_total", dto.MetricType_COUNTER, []string{"cbgrpc_state_from", "closed", "cbgrpc_state_to", "open", "cbgrpc_caused", "true"}, 1, 1},
			{"cbgrpc_transitions_total", dto.MetricType_COUNTER, []string{"cbgrpc_state_from", "closed", "cbgrpc_state_to", "open"}, 3, 3},
			{"cbgrpc_transitions_total", dto.MetricType_COUNTER, []string{"cbgrpc_state_from", "open", "cbgrpc_state_to", "half-open"}, 1, 0},
			{"cbgrpc_transitions_total", dto.MetricType_COUNTER, []string{"cbgrpc_state_from", "half-open", "cbgrpc_state_to", "closed", "cbgrpc_caused", "true"}, 1, 1},
		} {
			if v := value(c.name, c.typ, c.labels...); v < c.min || c.max > 0 && v > c.max {
				t.Errorf("%s%v = %v; want from %v to %v", c.name, c.labels, v, c.min, c.max)
			}
		}
		// The state gauge: every replica, a series of its own, saw the
		// breaker closed again.
		g, ok := families["cbgrpc_state"]
		if !ok || g.GetType() != dto.MetricType_GAUGE || len(g.GetMetric()) == 0 {
			t.Fatalf("cbgrpc_state: %v; want a gauge with a series\n%s", g, scrape)
		}
		closedBy := make(map[string]float64)
		for _, m := range g.GetMetric() {
			labels := make(map[string]string)
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if _, ok := labels["cbgrpc_scope"]; ok {
				t.Errorf("cbgrpc_state series %v has the scope, not asked for", m)
			}
			want := 0.0
			if labels["cbgrpc_state"] == "closed" {
				want = 1
				closedBy[labels["cbgrpc_breaker"]] = m.GetGauge().GetValue()
			}
			if m.GetGauge().GetValue() != want {
				t.Errorf("cbgrpc_state series %v; want %v breakers %s", m, want, labels["cbgrpc_state"])
			}
		}
		if len(closedBy) != 3 {
			t.Errorf("cbgrpc_state closed by replica: %v; want the 3 replicas", closedBy)
		}
		var excerpt []string
		for _, line := range strings.Split(string(scrape), "\n") {
			if strings.HasPrefix(line, "cbgrpc_decisions") || strings.HasPrefix(line, "cbgrpc_transitions") || strings.HasPrefix(line, "cbgrpc_state") ||
				strings.HasPrefix(line, "# TYPE cbgrpc_decisions") || strings.HasPrefix(line, "# TYPE cbgrpc_transitions") || strings.HasPrefix(line, "# TYPE cbgrpc_state") {
				excerpt = append(excerpt, line)
			}
		}
		t.Logf("the breaker's counters and gauge in the scrape:\n%s", strings.Join(excerpt, "\n"))
	})
}
