// Command quickstart shows one circuit breaker through its whole life, in
// one process and without Redis: a gRPC server that starts failing, a client
// with the breaker over the in-process coordinator, and a timeline of calls,
// rejections and transitions (closed -> open -> half-open -> closed), then
// the transition spans as an OpenTelemetry exporter receives them.
//
//	go run ./examples/quickstart
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"os"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/status"

	"github.com/cbgrpc/cbgrpc"
	"github.com/cbgrpc/cbgrpc/coordinator"
	"github.com/cbgrpc/cbgrpc/coordinator/memory"
)

// flaky answers EmptyCall, failing while failing is set.
type flaky struct {
	testgrpc.UnimplementedTestServiceServer
	failing atomic.Bool
	served  atomic.Int64
}

func (s *flaky) EmptyCall(context.Context, *testpb.Empty) (*testpb.Empty, error) {
	s.served.Add(1)
	if s.failing.Load() {
		return nil, status.Error(codes.Unavailable, "database connection pool exhausted")
	}
	return &testpb.Empty{}, nil
}

// timeline prints the demo's events, with the time since it started. As a
// span processor it prints each transition span as it ends, naming the call
// in whose trace it is: transitions end on the breaker's goroutines as well
// as the caller's, hence the lock.
type timeline struct {
	start time.Time
	mu    sync.Mutex
	w     io.Writer
	calls map[trace.SpanID]int // call number by the span ID of its span
}

func (t *timeline) printf(format string, args ...any) {
	t.mu.Lock()
	defer t.mu.Unlock()
	fmt.Fprintf(t.w, "%5.2fs  "+format, append([]any{time.Since(t.start).Seconds()}, args...)...)
}

func (t *timeline) call(n int, span trace.Span) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.calls[span.SpanContext().SpanID()] = n
}

func (t *timeline) OnStart(context.Context, sdktrace.ReadWriteSpan) {}
func (t *timeline) Shutdown(context.Context) error                  { return nil }
func (t *timeline) ForceFlush(context.Context) error                { return nil }

func (t *timeline) OnEnd(s sdktrace.ReadOnlySpan) {
	if s.Name() != "cbgrpc.transition" {
		return
	}
	attrs := map[string]string{}
	for _, a := range s.Attributes() {
		attrs[string(a.Key)] = a.Value.Emit()
	}
	cause := "no call"
	if n, ok := t.callOf(s.Parent().SpanID()); ok {
		cause = fmt.Sprintf("in the trace of call %d", n)
	}
	t.printf("** breaker %s -> %s (%s), %s\n", attrs["cbgrpc.state.from"], attrs["cbgrpc.state.to"], attrs["cbgrpc.reason"], cause)
}

// callOf returns the number of the call whose span has the ID id.
func (t *timeline) callOf(id trace.SpanID) (int, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	n, ok := t.calls[id]
	return n, ok
}

// transitions keeps the transition spans, to show them at the end as an
// exporter (Jaeger, Tempo, an OTLP collector) receives them: the calls'
// spans are there to be their parents, and the rejected calls' would drown
// them.
type transitions struct {
	mu    sync.Mutex
	spans []sdktrace.ReadOnlySpan
}

func (e *transitions) ExportSpans(_ context.Context, spans []sdktrace.ReadOnlySpan) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, s := range spans {
		if s.Name() == "cbgrpc.transition" {
			e.spans = append(e.spans, s)
		}
	}
	return nil
}

func (e *transitions) Shutdown(context.Context) error { return nil }

// print writes each span: its name, trace, parent (the call's span) and
// time, then its attributes, one a line.
func (e *transitions) print(w io.Writer, tl *timeline) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, s := range e.spans {
		parent := "no parent"
		if p := s.Parent(); p.IsValid() {
			parent = "child of span " + p.SpanID().String()
			if p.TraceID() != s.SpanContext().TraceID() {
				parent += " of trace " + p.TraceID().String()
			}
			if n, ok := tl.callOf(p.SpanID()); ok {
				parent += fmt.Sprintf(" (call %d)", n)
			}
		}
		fmt.Fprintf(w, "  %s  trace %s, %s, %.2fs to %.2fs\n", s.Name(), s.SpanContext().TraceID(), parent,
			s.StartTime().Sub(tl.start).Seconds(), s.EndTime().Sub(tl.start).Seconds())
		var attrs []string
		for _, a := range s.Attributes() {
			attrs = append(attrs, fmt.Sprintf("%s=%s", a.Key, a.Value.Emit()))
		}
		sort.Strings(attrs)
		fmt.Fprintf(w, "      %s\n", strings.Join(attrs, "\n      "))
	}
}

func main() {
	if err := demo(os.Stdout); err != nil {
		log.Fatal(err)
	}
}

func demo(w io.Writer) error {
	tl := &timeline{start: time.Now(), w: w, calls: make(map[trace.SpanID]int)}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	srv := grpc.NewServer()
	svc := &flaky{}
	testgrpc.RegisterTestServiceServer(srv, svc)
	go srv.Serve(lis)
	defer srv.Stop()

	// Transition spans go to the timeline and to an exporter that keeps
	// them until the end, so that they do not break up the timeline.
	exported := &transitions{}
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithSyncer(exported),
		sdktrace.WithSpanProcessor(tl),
	)
	defer tp.Shutdown(context.Background())
	tracer := tp.Tracer("quickstart")

	// A policy for a demo, said below; start from coordinator.DefaultPolicy
	// in production.
	policy := coordinator.Policy{
		Window: 10 * time.Second, Buckets: 10,
		MinCalls: 6, FailureRatio: 0.5,
		OpenFor: time.Second, MaxOpenFor: 4 * time.Second,
		Probes: 1, ProbeLease: time.Second, ProbeSuccesses: 2,
	}
	breaker, err := cbgrpc.New(memory.New(),
		cbgrpc.WithPolicy(policy),
		cbgrpc.WithTracerProvider(tp),
		cbgrpc.WithRecordInterval(10*time.Millisecond),
	)
	if err != nil {
		return err
	}
	conn, err := grpc.NewClient(lis.Addr().String(),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithUnaryInterceptor(breaker.UnaryClientInterceptor()),
		grpc.WithStreamInterceptor(breaker.StreamClientInterceptor()),
	)
	if err != nil {
		return err
	}
	defer conn.Close()
	client := testgrpc.NewTestServiceClient(conn)

	fmt.Fprintf(w, "The breaker's policy, a demonstration's: it trips when %.0f%% of at least %d calls in %v fail,\n", 100*policy.FailureRatio, policy.MinCalls, policy.Window)
	fmt.Fprintf(w, "stays open %v (longer after a failed probe, up to %v), and closes after %d probes succeed.\n", policy.OpenFor, policy.MaxOpenFor, policy.ProbeSuccesses)
	fmt.Fprintln(w, "One call every 150ms, each in a trace of its own. The server fails from 1.0s to 3.5s.")
	fmt.Fprintln(w)
	var calls, rejected int
	for time.Since(tl.start) < 6*time.Second {
		switch t := time.Since(tl.start); {
		case t >= time.Second && t < 3500*time.Millisecond && !svc.failing.Load():
			svc.failing.Store(true)
			tl.printf("-- the server starts failing\n")
		case t >= 3500*time.Millisecond && svc.failing.Load():
			svc.failing.Store(false)
			tl.printf("-- the server recovers\n")
		}
		calls++
		// The span of the work that makes the call, as a request handler
		// would have: the breaker's spans for this call are its children.
		ctx, span := tracer.Start(context.Background(), "call")
		tl.call(calls, span)
		_, err := client.EmptyCall(ctx, &testpb.Empty{})
		span.End()
		var open *cbgrpc.OpenError
		switch {
		case err == nil:
			tl.printf("call %d ok\n", calls)
		case errors.As(err, &open):
			rejected++
			tl.printf("call %d rejected by the breaker, not sent (%s; retry after %v)\n", calls, open.State, open.RetryAfter.Round(10*time.Millisecond))
		default:
			tl.printf("call %d failed: %s\n", calls, status.Code(err))
		}
		time.Sleep(150 * time.Millisecond)
	}
	if err := breaker.Close(); err != nil {
		return err
	}
	fmt.Fprintf(w, "\n%d calls, %d rejected without reaching the server, %d served.\n", calls, rejected, svc.served.Load())
	fmt.Fprintln(w, "\nThe transition spans, as an exporter receives them:")
	exported.print(w, tl)
	return nil
}
