package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel/attribute"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// serviceName is the service.name of the spans and the target_info series.
const serviceName = "cbgrpc-example-production"

// printer writes the example's transcript. Transition spans end on the
// Breaker's goroutines as well as the caller's, hence the lock.
type printer struct {
	mu sync.Mutex
	w  io.Writer
}

func (p *printer) printf(format string, args ...any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	fmt.Fprintf(p.w, format, args...)
}

// transitions is a span processor that prints each cbgrpc.transition span
// as it ends, and closes recovered at the first close after a trip.
type transitions struct {
	out       *printer
	mu        sync.Mutex
	tripped   bool
	recovered chan struct{}
}

func (t *transitions) OnStart(context.Context, sdktrace.ReadWriteSpan) {}
func (t *transitions) Shutdown(context.Context) error                  { return nil }
func (t *transitions) ForceFlush(context.Context) error                { return nil }

func (t *transitions) OnEnd(s sdktrace.ReadOnlySpan) {
	if s.Name() != "cbgrpc.transition" {
		return
	}
	attrs := map[attribute.Key]string{}
	for _, a := range s.Attributes() {
		attrs[a.Key] = a.Value.Emit()
	}
	from, to := attrs["cbgrpc.state.from"], attrs["cbgrpc.state.to"]
	t.out.printf("   ** %s: %s -> %s (%s), span %s\n", attrs["cbgrpc.scope"], from, to, attrs["cbgrpc.reason"], s.SpanContext().SpanID())
	t.mu.Lock()
	defer t.mu.Unlock()
	switch {
	case to == "open":
		t.tripped = true
	case to == "closed" && t.tripped && from != "closed":
		t.tripped = false
		select {
		case <-t.recovered: // a second recovery, after the first ended the scenario
		default:
			close(t.recovered)
		}
	}
}

// telemetry is the process's OpenTelemetry SDK: a TracerProvider and a
// MeterProvider whose metrics Prometheus scrapes at url.
type telemetry struct {
	tp          *sdktrace.TracerProvider
	mp          *sdkmetric.MeterProvider
	transitions *transitions
	web         *http.Server
	url         string
}

// startTelemetry sets up the providers and serves /metrics on addr.
func startTelemetry(out *printer, addr string) (*telemetry, error) {
	res, err := resource.Merge(resource.Default(), resource.NewSchemaless(attribute.String("service.name", serviceName)))
	if err != nil {
		return nil, err
	}
	// A registry of its own, not the global one, so that nothing else in
	// the process shows up in the scrape.
	registry := prometheus.NewRegistry()
	exporter, err := otelprom.New(otelprom.WithRegisterer(registry))
	if err != nil {
		return nil, err
	}
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("serve /metrics: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(registry, promhttp.HandlerOpts{}))
	t := &telemetry{
		transitions: &transitions{out: out, recovered: make(chan struct{})},
		mp:          sdkmetric.NewMeterProvider(sdkmetric.WithResource(res), sdkmetric.WithReader(exporter)),
		web:         &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second},
		url:         "http://" + lis.Addr().String() + "/metrics",
	}
	// In production, add sdktrace.WithBatcher(exporter) with an OTLP
	// exporter, as examples/otel does; here the spans are only printed.
	t.tp = sdktrace.NewTracerProvider(sdktrace.WithResource(res), sdktrace.WithSpanProcessor(t.transitions))
	go t.web.Serve(lis)
	return t, nil
}

// scopeLabels are the instrumentation scope's labels on every series: the
// same on all of the breaker's, so left out of the printout.
var scopeLabels = regexp.MustCompile(`,?otel_scope_(name|schema_url|version)="[^"]*"`)

// recovery is the series of the transition that ends the scenario: the
// Breaker counts transitions as its notifier delivers them, after the
// span that the scenario waits for has ended.
var recovery = regexp.MustCompile(`cbgrpc_transitions_total\{[^}]*cbgrpc_state_from="half-open"[^}]*cbgrpc_state_to="closed"`)

// printScrape scrapes /metrics as Prometheus does, until the recovery has
// been counted (2 s at most), and prints the breaker's series, and how
// many series otelgrpc's client metrics make.
func (t *telemetry) printScrape(ctx context.Context, out *printer) error {
	var body []byte
	for deadline := time.Now().Add(2 * time.Second); ; {
		var err error
		if body, err = t.scrape(ctx); err != nil {
			return err
		}
		if recovery.Match(body) || time.Now().After(deadline) {
			break
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
	out.printf("\nThe breaker's series at %s:\n", t.url)
	rpc := 0
	for sc := bufio.NewScanner(bytes.NewReader(body)); sc.Scan(); {
		line := sc.Text()
		switch {
		// The histograms' buckets would fill the screen.
		case strings.Contains(line, "_bucket{"):
		case strings.HasPrefix(line, "cbgrpc_"):
			out.printf("  %s\n", strings.Replace(scopeLabels.ReplaceAllString(line, ""), "{,", "{", 1))
		case strings.HasPrefix(line, "rpc_client_"):
			rpc++
		}
	}
	out.printf("and %d series of otelgrpc's rpc_client_* metrics (buckets left out).\n", rpc)
	return nil
}

// scrape reads /metrics once.
func (t *telemetry) scrape(ctx context.Context) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, t.url, nil)
	if err != nil {
		return nil, err
	}
	// No idle connection outlives the scrape.
	req.Close = true
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("scrape %s: %w", t.url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("scrape %s: %s", t.url, resp.Status)
	}
	return io.ReadAll(resp.Body)
}

// shutdown stops serving /metrics and shuts the providers down.
func (t *telemetry) shutdown(ctx context.Context) error {
	return errors.Join(t.web.Shutdown(ctx), t.tp.Shutdown(ctx), t.mp.Shutdown(ctx))
}
