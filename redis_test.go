package cbgrpc

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"google.golang.org/grpc/codes"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/status"

	"github.com/cbgrpc/cbgrpc/coordinator"
	cbredis "github.com/cbgrpc/cbgrpc/coordinator/redis"
	"github.com/cbgrpc/cbgrpc/internal/redistest"
)

// The same rules as over memory, against a real redis-server that the
// tests stop and pause. The clients are go-redis defaults, as a user's
// would be: no ContextTimeoutEnabled.

// TestRedisStoppedKnownOpenRejected: with redis-server gone, a scope last
// seen open is rejected whatever the policy; another follows the policy.
func TestRedisStoppedKnownOpenRejected(t *testing.T) {
	for _, policy := range []FailurePolicy{FailOpen, FailClosed} {
		t.Run(policy.String(), func(t *testing.T) {
			srv := redistest.Start(t)
			p := tripPolicy()
			b := newBreaker(t, cbredis.New(srv.Client(t)), WithPolicy(p), WithCoordinatorFailure(policy))
			svc := &service{}
			client := testgrpc.NewTestServiceClient(dial(t, serveTest(t, svc), b))
			bg := context.Background()

			svc.setErr(status.Error(codes.Unavailable, "down"))
			client.EmptyCall(bg, &testpb.Empty{})
			eventually(t, "the breaker to open", func() bool {
				_, err := client.EmptyCall(bg, &testpb.Empty{})
				return errors.Is(err, ErrOpen)
			})
			svc.setErr(nil)

			srv.Stop()
			reached := svc.calls.Load()
			for range 3 { // the first asks the dead server, the rest are in back-off
				_, err := client.EmptyCall(bg, &testpb.Empty{})
				if !errors.Is(err, ErrOpen) {
					t.Fatalf("known-open scope with Redis stopped: %v, want ErrOpen", err)
				}
			}
			if svc.calls.Load() != reached {
				t.Error("a rejected call reached the server")
			}
			_, err := client.UnaryCall(bg, &testpb.SimpleRequest{})
			if got, want := errors.Is(err, ErrOpen), policy == FailClosed; got != want {
				t.Errorf("unknown scope with Redis stopped, %v: rejected=%v (%v)", policy, got, err)
			}
		})
	}
}

// TestRedisPausedAdmissionBounded: a SIGSTOPped redis-server behind a
// default go-redis client (which would block a read for its 5s
// ReadTimeout) costs a call the coordinator timeout at most; then the
// back-off spares the following calls; and Close, with Redis still
// paused, waits for the stuck calls and leaves nothing behind.
func TestRedisPausedAdmissionBounded(t *testing.T) {
	srv := redistest.Start(t)
	rdb := goredis.NewClient(&goredis.Options{Addr: srv.Addr()})
	defer rdb.Close()
	const timeout = 50 * time.Millisecond
	b := newBreaker(t, cbredis.New(rdb), WithCoordinatorTimeout(timeout))
	client := testgrpc.NewTestServiceClient(dial(t, serveTest(t, &service{}), b))
	if _, err := client.EmptyCall(context.Background(), &testpb.Empty{}); err != nil {
		t.Fatal(err)
	}

	srv.Pause()
	defer srv.Resume()
	var worst time.Duration
	start := time.Now()
	calls := 0
	for time.Since(start) < 300*time.Millisecond {
		t0 := time.Now()
		if _, err := client.EmptyCall(context.Background(), &testpb.Empty{}); err != nil {
			t.Fatalf("fail-open call with Redis paused: %v", err)
		}
		worst = max(worst, time.Since(t0))
		calls++
	}
	t.Logf("Redis paused: %d calls in 300ms, slowest %v (timeout %v)", calls, worst, timeout)
	if worst > timeout+250*time.Millisecond {
		t.Errorf("slowest call with Redis paused took %v, want about %v", worst, timeout)
	}

	// Redis stays paused: Close must outwait the reads stuck for go-redis's
	// ReadTimeout, within its own bound.
	t0 := time.Now()
	if err := b.Close(); err != nil {
		t.Errorf("Close with Redis paused: %v", err)
	}
	t.Logf("Close with Redis paused took %v", time.Since(t0))
}

// TestRedisOneTripOneSpan: 8 replicas with their own Redis clients and
// tracer providers trip one scope together; one span shows it.
func TestRedisOneTripOneSpan(t *testing.T) {
	srv := redistest.Start(t)
	const replicas = 8
	p := coordinator.DefaultPolicy()
	p.MinCalls = 16
	svc := &service{}
	svc.setErr(status.Error(codes.Unavailable, "down"))
	addr := serveTest(t, svc)
	tracings := make([]*tracing, replicas)
	var wg sync.WaitGroup
	for i := range replicas {
		tracings[i] = newTracing()
		b := newBreaker(t, cbredis.New(srv.Client(t)), WithPolicy(p), WithTracerProvider(tracings[i].tp), WithRecordInterval(time.Millisecond))
		client := testgrpc.NewTestServiceClient(dial(t, addr, b))
		wg.Add(1)
		go func() {
			defer wg.Done()
			deadline := time.Now().Add(10 * time.Second)
			for time.Now().Before(deadline) {
				if _, err := client.EmptyCall(context.Background(), &testpb.Empty{}); errors.Is(err, ErrOpen) {
					return
				}
			}
			t.Errorf("replica never saw the breaker open")
		}()
	}
	wg.Wait()
	spans := 0
	for _, tr := range tracings {
		spans += len(tr.transitions(coordinator.StateClosed, coordinator.StateOpen))
	}
	if spans != 1 {
		t.Errorf("%d closed -> open spans across %d replicas, want exactly 1", spans, replicas)
	}
}
