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
	"log"
	"net"
	"os"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/exporters/stdout/stdouttrace"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
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

var start = time.Now()

func at() string { return fmt.Sprintf("%5.2fs", time.Since(start).Seconds()) }

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

// timeline is a span processor that prints each transition span as it
// ends, in the timeline.
type timeline struct{}

func (timeline) OnStart(context.Context, sdktrace.ReadWriteSpan) {}
func (timeline) Shutdown(context.Context) error                  { return nil }
func (timeline) ForceFlush(context.Context) error                { return nil }

func (timeline) OnEnd(s sdktrace.ReadOnlySpan) {
	attrs := map[string]string{}
	for _, a := range s.Attributes() {
		attrs[string(a.Key)] = a.Value.Emit()
	}
	fmt.Printf("%s  ** breaker %s -> %s (%s), generation %s\n",
		at(), attrs["cbgrpc.state.from"], attrs["cbgrpc.state.to"], attrs["cbgrpc.reason"], attrs["cbgrpc.generation"])
}

func main() {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	srv := grpc.NewServer()
	svc := &flaky{}
	testgrpc.RegisterTestServiceServer(srv, svc)
	go srv.Serve(lis)
	defer srv.Stop()

	// Transition spans go to the stdout exporter (kept until the end, so
	// they do not break up the timeline) and to the timeline.
	var exported bytes.Buffer
	exporter, err := stdouttrace.New(stdouttrace.WithWriter(&exported), stdouttrace.WithoutTimestamps())
	if err != nil {
		log.Fatal(err)
	}
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithSyncer(exporter),
		sdktrace.WithSpanProcessor(timeline{}),
	)
	defer tp.Shutdown(context.Background())

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
		log.Fatal(err)
	}
	conn, err := grpc.NewClient(lis.Addr().String(),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithUnaryInterceptor(breaker.UnaryClientInterceptor()),
		grpc.WithStreamInterceptor(breaker.StreamClientInterceptor()),
	)
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	client := testgrpc.NewTestServiceClient(conn)

	fmt.Println("One call every 150ms. The server fails from 1.0s to 3.5s.")
	fmt.Println()
	var calls, rejected int
	for time.Since(start) < 6*time.Second {
		switch t := time.Since(start); {
		case t >= time.Second && t < 3500*time.Millisecond && !svc.failing.Load():
			svc.failing.Store(true)
			fmt.Printf("%s  -- the server starts failing\n", at())
		case t >= 3500*time.Millisecond && svc.failing.Load():
			svc.failing.Store(false)
			fmt.Printf("%s  -- the server recovers\n", at())
		}
		calls++
		_, err := client.EmptyCall(context.Background(), &testpb.Empty{})
		var open *cbgrpc.OpenError
		switch {
		case err == nil:
			fmt.Printf("%s  call ok\n", at())
		case errors.As(err, &open):
			rejected++
			fmt.Printf("%s  call rejected by the breaker, not sent (%s; retry after %v)\n", at(), open.State, open.RetryAfter.Round(10*time.Millisecond))
		default:
			fmt.Printf("%s  call failed: %s\n", at(), status.Code(err))
		}
		time.Sleep(150 * time.Millisecond)
	}
	if err := breaker.Close(); err != nil {
		log.Fatal(err)
	}
	fmt.Printf("\n%d calls, %d rejected without reaching the server, %d served.\n", calls, rejected, svc.served.Load())
	fmt.Println("\nThe transition spans, as the OpenTelemetry stdout exporter wrote them:")
	os.Stdout.Write(exported.Bytes())
}
