// Command otel sends what the breaker tells OpenTelemetry to real backends:
// spans over OTLP/gRPC to a collector (Jaeger, Tempo, the OpenTelemetry
// Collector), and metrics through the OpenTelemetry Prometheus exporter, on
// an HTTP /metrics endpoint that Prometheus scrapes.
//
// Three replicas of a service, each with its own Breaker over one shared
// in-process coordinator, call a dependency that fails for a while: the
// breaker trips, rejects, probes and closes again. Each request a replica
// handles is a span of its own, so every transition span lands in the trace
// of the request that caused it (the trip: in the trace of the failing
// request that tipped the window). At the end the example scrapes its own
// /metrics and prints the breaker's series.
//
//	go run ./examples/otel                          # spans to localhost:4317
//	go run ./examples/otel -otlp 127.0.0.1:4317 -metrics 127.0.0.1:9464 -hold 1m
//
// To see the spans, run a backend that accepts OTLP over gRPC on port 4317,
// for instance Jaeger (docker run -p 16686:16686 -p 4317:4317
// jaegertracing/jaeger, then http://localhost:16686, service
// cbgrpc-example-otel) or Grafana Tempo with its OTLP gRPC receiver. To graph
// the metrics, point Prometheus at the -metrics address and run with -hold
// so that it has time to scrape: cbgrpc_decisions_total and
// cbgrpc_transitions_total (rates by cbgrpc_verdict, cbgrpc_state_from and
// cbgrpc_state_to) and the cbgrpc_state gauge (by cbgrpc_state and
// cbgrpc_breaker, the replica).
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	grpccodes "google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/status"

	"github.com/cbgrpc/cbgrpc"
	"github.com/cbgrpc/cbgrpc/coordinator"
	"github.com/cbgrpc/cbgrpc/coordinator/memory"
)

// serviceName is the service.name of the spans and the target_info series.
const serviceName = "cbgrpc-example-otel"

// scope is the one breaker the replicas share: the dependency's name.
const scope = "inventory"

// requestSpan is the name of the span of each request a replica handles.
const requestSpan = "handle order"

// dependency answers EmptyCall, failing while failing is set.
type dependency struct {
	testgrpc.UnimplementedTestServiceServer
	failing atomic.Bool
}

func (d *dependency) EmptyCall(context.Context, *testpb.Empty) (*testpb.Empty, error) {
	if d.failing.Load() {
		return nil, status.Error(grpccodes.Unavailable, "inventory database unreachable")
	}
	return &testpb.Empty{}, nil
}

// transitions prints each transition span as it ends; transitions end on
// the breakers' goroutines as well as the callers', hence the lock.
type transitions struct {
	mu sync.Mutex
	w  io.Writer
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
	t.mu.Lock()
	defer t.mu.Unlock()
	fmt.Fprintf(t.w, "   ** %s -> %s (%s): span %s in trace %s, child of %s\n",
		attrs["cbgrpc.state.from"], attrs["cbgrpc.state.to"], attrs["cbgrpc.reason"],
		s.SpanContext().SpanID(), s.SpanContext().TraceID(), s.Parent().SpanID())
}

func (t *transitions) printf(format string, args ...any) {
	t.mu.Lock()
	defer t.mu.Unlock()
	fmt.Fprintf(t.w, format, args...)
}

func main() {
	otlp := flag.String("otlp", "localhost:4317", "address of the OTLP/gRPC trace collector")
	addr := flag.String("metrics", "localhost:9464", "address to serve /metrics on")
	hold := flag.Duration("hold", 0, "keep serving /metrics this long after the scenario (Ctrl-C ends it)")
	flag.Parse()
	lis, err := net.Listen("tcp", *addr)
	if err != nil {
		log.Fatal(err)
	}
	err = run(os.Stdout, *otlp, lis, func(url string) {
		printScrape(os.Stdout, url)
		if *hold > 0 {
			fmt.Printf("\nServing %s for %v (Ctrl-C to stop).\n", url, *hold)
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
			defer stop()
			select {
			case <-ctx.Done():
			case <-time.After(*hold):
			}
		}
	})
	if err != nil {
		log.Fatal(err)
	}
}

// printScrape prints the breaker's series of a scrape of url, as
// Prometheus sees them.
func printScrape(w io.Writer, url string) {
	resp, err := http.Get(url)
	if err != nil {
		fmt.Fprintf(w, "scrape %s: %v\n", url, err)
		return
	}
	defer resp.Body.Close()
	fmt.Fprintf(w, "\nThe breaker's series at %s:\n", url)
	for sc := bufio.NewScanner(resp.Body); sc.Scan(); {
		// The histogram's buckets would fill the screen.
		if strings.HasPrefix(sc.Text(), "cbgrpc_") && !strings.HasPrefix(sc.Text(), "cbgrpc_coordinator_duration_seconds_bucket") {
			fmt.Fprintln(w, "  "+sc.Text())
		}
	}
}

// run plays the scenario with spans sent to the OTLP/gRPC collector at
// otlp and metrics served on lis, then calls hold with the URL of the
// metrics before it stops serving them and flushes the spans.
func run(w io.Writer, otlp string, lis net.Listener, hold func(metricsURL string)) (err error) {
	ctx := context.Background()
	res, err := resource.Merge(resource.Default(), resource.NewSchemaless(attribute.String("service.name", serviceName)))
	if err != nil {
		return err
	}
	spans, err := otlptracegrpc.New(ctx, otlptracegrpc.WithEndpoint(otlp), otlptracegrpc.WithInsecure())
	if err != nil {
		return err
	}
	out := &transitions{w: w}
	tp := sdktrace.NewTracerProvider(sdktrace.WithResource(res), sdktrace.WithBatcher(spans), sdktrace.WithSpanProcessor(out))
	defer func() {
		// Without a collector, give up on the spans after a while rather
		// than retry for a minute.
		ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		if e := tp.Shutdown(ctx); e != nil && err == nil {
			err = fmt.Errorf("sending spans to %s: %w", otlp, e)
		}
	}()

	// A registry of its own, not the global one, so that nothing else in
	// the process shows up in the scrape.
	registry := prometheus.NewRegistry()
	metrics, err := otelprom.New(otelprom.WithRegisterer(registry))
	if err != nil {
		return err
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithResource(res), sdkmetric.WithReader(metrics))
	defer mp.Shutdown(ctx)
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(registry, promhttp.HandlerOpts{}))
	web := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go web.Serve(lis)
	defer web.Close()

	return scenario(ctx, out, tp, mp, func() { hold("http://" + lis.Addr().String() + "/metrics") })
}

// scenario runs three replicas in rounds, each handling one request per
// round that calls the dependency, until the breaker tripped and closed
// again. Then it calls hold, while the replicas' breakers still report
// their state.
func scenario(ctx context.Context, out *transitions, tp *sdktrace.TracerProvider, mp *sdkmetric.MeterProvider, hold func()) error {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	srv := grpc.NewServer()
	dep := &dependency{}
	testgrpc.RegisterTestServiceServer(srv, dep)
	go srv.Serve(lis)
	defer srv.Stop()

	// The fleet's coordinator: in-process here, Redis in production.
	coord := memory.New()
	policy := coordinator.Policy{
		Window: 10 * time.Second, Buckets: 10,
		MinCalls: 6, FailureRatio: 0.5,
		OpenFor: 500 * time.Millisecond,
		Probes:  1, ProbeLease: time.Second, ProbeSuccesses: 2,
	}
	tracer := tp.Tracer("github.com/cbgrpc/cbgrpc/examples/otel")
	var clients []testgrpc.TestServiceClient
	// reclosed counts the replicas that learned the breaker closed again.
	// The replica whose probe closed it counts and traces the transition
	// before it tells its callback, so once all three told, the metrics
	// hold it.
	var reclosed atomic.Int32
	for i := range 3 {
		var once sync.Once
		b, err := cbgrpc.New(coord,
			// Replicas are processes of their own in production; here,
			// in one, a name each keeps their series apart.
			cbgrpc.WithName(fmt.Sprintf("replica-%d", i+1)),
			cbgrpc.WithOnTransition(func(tr coordinator.Transition) {
				if tr.From == coordinator.StateHalfOpen && tr.To == coordinator.StateClosed {
					once.Do(func() { reclosed.Add(1) })
				}
			}),
			cbgrpc.WithPolicy(policy),
			cbgrpc.WithScope(func(context.Context, string, string) string { return scope }),
			cbgrpc.WithRecordInterval(10*time.Millisecond),
			cbgrpc.WithTracerProvider(tp),
			cbgrpc.WithMeterProvider(mp),
		)
		if err != nil {
			return err
		}
		defer b.Close()
		conn, err := grpc.NewClient(lis.Addr().String(),
			grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithUnaryInterceptor(b.UnaryClientInterceptor()),
		)
		if err != nil {
			return err
		}
		defer conn.Close()
		clients = append(clients, testgrpc.NewTestServiceClient(conn))
	}

	// handle is one request a replica handles: a span of its own, with the
	// call to the dependency inside it.
	handle := func(replica int) string {
		ctx, span := tracer.Start(ctx, requestSpan, trace.WithAttributes(attribute.Int("replica", replica+1)))
		defer span.End()
		_, err := clients[replica].EmptyCall(ctx, &testpb.Empty{})
		switch {
		case err == nil:
			return "ok"
		case errors.Is(err, cbgrpc.ErrOpen):
			span.SetStatus(codes.Error, "rejected by the breaker")
			return "rejected"
		default:
			span.SetStatus(codes.Error, err.Error())
			return "failed"
		}
	}
	out.printf("Replicas 1, 2 and 3 handle a request each per round; each request calls %q.\n\n", scope)
	tripped := false
	for round := 1; ; round++ {
		switch {
		case round == 4:
			dep.failing.Store(true)
			out.printf("-- the dependency starts failing\n")
		case tripped && dep.failing.Load():
			dep.failing.Store(false)
			out.printf("-- the dependency recovers\n")
		case round > 100:
			return fmt.Errorf("the breaker did not trip and close again within 100 rounds")
		}
		var answers []string
		for replica := range clients {
			answers = append(answers, fmt.Sprintf("%-9s", handle(replica)))
		}
		out.printf("round %2d  %s\n", round, strings.TrimSpace(strings.Join(answers, " ")))
		s, err := coord.Snapshot(ctx, scope, policy)
		if err != nil {
			return err
		}
		tripped = tripped || s.State != coordinator.StateClosed
		if tripped && s.State == coordinator.StateClosed {
			for deadline := time.Now().Add(2 * time.Second); reclosed.Load() < 3 && time.Now().Before(deadline); {
				time.Sleep(time.Millisecond)
			}
			hold()
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
}
