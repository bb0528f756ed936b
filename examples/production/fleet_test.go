package main

// The fleet beside the example in the monitoring tests: what a single
// process never shows (an outlier, a dry run, a stall, flapping, a
// coordinator failing).

import (
	"context"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/status"

	"github.com/cbgrpc/cbgrpc"
	"github.com/cbgrpc/cbgrpc/coordinator"
	cbredis "github.com/cbgrpc/cbgrpc/coordinator/redis"
	"github.com/cbgrpc/cbgrpc/internal/redistest"
)

// flaky is the fleet's dependency: EmptyCall fails while it is down, and
// always for a replica whose path to it is broken; UnaryCall never
// answers.
type flaky struct {
	testgrpc.UnimplementedTestServiceServer
	down atomic.Bool
}

func (d *flaky) EmptyCall(ctx context.Context, _ *testpb.Empty) (*testpb.Empty, error) {
	if d.down.Load() {
		return nil, status.Error(codes.Unavailable, "down")
	}
	return &testpb.Empty{}, nil
}

func (d *flaky) UnaryCall(ctx context.Context, _ *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
	<-ctx.Done()
	return nil, status.FromContextError(ctx.Err()).Err()
}

// broken is a path to the dependency that fails every call.
type broken struct {
	testgrpc.UnimplementedTestServiceServer
}

func (broken) EmptyCall(context.Context, *testpb.Empty) (*testpb.Empty, error) {
	return nil, status.Error(codes.Unavailable, "sidecar down")
}

// fleet is five replicas of a service, each a process of its own as far as
// Prometheus is concerned (its own /metrics), calling one dependency under
// one breaker in a Redis of their own.
type fleet struct {
	redis    *redistest.Server
	dep      *flaky
	replicas []*fleetReplica
}

type fleetReplica struct {
	name   string
	tel    *telemetry
	b      *cbgrpc.Breaker
	client testgrpc.TestServiceClient
}

func startFleet(t *testing.T) *fleet {
	t.Helper()
	f := &fleet{redis: redistest.Start(t), dep: &flaky{}}
	good, bad := serveFleet(t, f.dep), serveFleet(t, broken{})
	p := coordinator.DefaultPolicy()
	p.Window, p.MinCalls, p.ConsecutiveFailures = 3*time.Second, 6, 5
	p.OpenFor, p.MaxOpenFor = 200*time.Millisecond, 400*time.Millisecond
	p.Probes, p.ProbeLease, p.ProbeSuccesses = 1, time.Second, 1
	for _, r := range []struct {
		name string
		addr string
		opts []cbgrpc.Option
	}{
		{"a", good, nil},
		{"b", good, nil},
		{"c", good, nil},
		{"canary", good, []cbgrpc.Option{cbgrpc.WithDryRun()}},
		{"broken", bad, nil},
	} {
		tel, err := startTelemetry(&printer{w: io.Discard}, "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			tel.shutdown(ctx)
		})
		opts := append([]cbgrpc.Option{
			cbgrpc.WithReplicaID(r.name),
			cbgrpc.WithPolicy(p),
			cbgrpc.WithScope(func(context.Context, string, string) string { return "payments" }),
			cbgrpc.WithScopeInMetrics(),
			cbgrpc.WithStallAfter(150 * time.Millisecond),
			// Not the default 50 ms, which a loaded test machine overruns;
			// Redis's pauses are longer.
			cbgrpc.WithCoordinatorTimeout(500 * time.Millisecond),
			cbgrpc.WithTracerProvider(tel.tp),
			cbgrpc.WithMeterProvider(tel.mp),
		}, r.opts...)
		b, err := cbgrpc.New(cbredis.New(f.redis.Client(t)), opts...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { b.Close() })
		conn, err := grpc.NewClient(r.addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithUnaryInterceptor(b.UnaryClientInterceptor()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		f.replicas = append(f.replicas, &fleetReplica{name: r.name, tel: tel, b: b, client: testgrpc.NewTestServiceClient(conn)})
	}
	return f
}

func serveFleet(t *testing.T, svc testgrpc.TestServiceServer) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	testgrpc.RegisterTestServiceServer(srv, svc)
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	return lis.Addr().String()
}

// targets are the replicas' /metrics addresses.
func (f *fleet) targets() []string {
	var ts []string
	for _, r := range f.replicas {
		ts = append(ts, strings.TrimSuffix(strings.TrimPrefix(r.tel.url, "http://"), "/metrics"))
	}
	return ts
}

// play has every replica call every 20 ms while the scenes pass: the
// broken replica fails alone for 3 s, one call stalls, the dependency
// goes down and up four times, and Redis pauses twice for 1.5 s (a
// counter's first value is no increase to Prometheus: the second pause's
// failures and drops are what rate() sees).
func (f *fleet) play(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for _, r := range f.replicas {
		wg.Go(func() {
			tick := time.NewTicker(20 * time.Millisecond)
			defer tick.Stop()
			for {
				callCtx, done := context.WithTimeout(ctx, time.Second)
				r.client.EmptyCall(callCtx, &testpb.Empty{})
				done()
				select {
				case <-ctx.Done():
					return
				case <-tick.C:
				}
			}
		})
	}
	defer func() { cancel(); wg.Wait() }()
	time.Sleep(3 * time.Second)
	stallCtx, done := context.WithTimeout(ctx, time.Second)
	f.replicas[0].client.UnaryCall(stallCtx, &testpb.SimpleRequest{})
	done()
	for range 4 {
		f.dep.down.Store(true)
		time.Sleep(800 * time.Millisecond)
		f.dep.down.Store(false)
		time.Sleep(1200 * time.Millisecond)
	}
	for range 2 {
		f.redis.Pause()
		time.Sleep(1500 * time.Millisecond)
		f.redis.Resume()
		time.Sleep(1500 * time.Millisecond)
	}
}
