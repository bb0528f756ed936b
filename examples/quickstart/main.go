// Command quickstart shows one circuit breaker through its whole life, in
// one process and without Redis: a gRPC server that starts failing, a client
// with the breaker over the in-process coordinator, and a timeline of calls,
// rejections and transitions (closed -> open -> half-open -> closed), with
// the transition spans exported by the OpenTelemetry stdout exporter.
//
//	go run ./examples/quickstart
package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/exporters/stdout/stdouttrace"
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
	t.mu.Lock()
	n, ok := t.calls[s.Parent().SpanID()]
	t.mu.Unlock()
	cause := "no call"
	if ok {
		cause = fmt.Sprintf("in the trace of call %d", n)
	}
	t.printf("** breaker %s -> %s (%s), generation %s, %s\n",
		attrs["cbgrpc.state.from"], attrs["cbgrpc.state.to"], attrs["cbgrpc.reason"], attrs["cbgrpc.generation"], cause)
}

// transitionsOnly exports the transition spans alone: the calls' spans
// are there to be their parents, and the rejected calls' would drown them.
type transitionsOnly struct{ sdktrace.SpanExporter }

func (e transitionsOnly) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	var keep []sdktrace.ReadOnlySpan
	for _, s := range spans {
		if s.Name() == "cbgrpc.transition" {
			keep = append(keep, s)
		}
	}
	if len(keep) == 0 {
		return nil
	}
	return e.SpanExporter.ExportSpans(ctx, keep)
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

	// Transition spans go to the stdout exporter (kept until the end, so
	// they do not break up the timeline) and to the timeline.
	var exported bytes.Buffer
	exporter, err := stdouttrace.New(stdouttrace.WithWriter(&exported))
	if err != nil {
		return err
	}
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithSyncer(transitionsOnly{exporter}),
		sdktrace.WithSpanProcessor(tl),
	)
	defer tp.Shutdown(context.Background())
	tracer := tp.Tracer("quickstart")

	// A policy for a demo: trip at half of 6 calls, stay open 1s (2s after
	// a failed probe), close after 2 good probes.
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
	tl.mu.Lock()
	defer tl.mu.Unlock()
	fmt.Fprintf(w, "\n%d calls, %d rejected without reaching the server, %d served.\n", calls, rejected, svc.served.Load())
	fmt.Fprintln(w, "\nThe transition spans, as the OpenTelemetry stdout exporter wrote them:")
	_, err = w.Write(exported.Bytes())
	return err
}
