package cbgrpc

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	testpb "google.golang.org/grpc/interop/grpc_testing"

	"github.com/cbgrpc/cbgrpc/coordinator"
	"github.com/cbgrpc/cbgrpc/coordinator/memory"
	"github.com/cbgrpc/cbgrpc/internal/instant"
)

// TestVerdictOncePerRun: the failure that makes this replica's run as
// long as its policy's threshold, and no other, brings a verdict to wait
// for; releasing it lets the waiters go, and a success starts a new run.
func TestVerdictOncePerRun(t *testing.T) {
	cases := []struct {
		name string
		edit func(*coordinator.Policy)
		at   int
	}{
		{"consecutive failures", func(*coordinator.Policy) {}, coordinator.DefaultPolicy().ConsecutiveFailures},
		{"ratio alone", func(p *coordinator.Policy) { p.ConsecutiveFailures = 0 }, coordinator.DefaultPolicy().MinCalls},
		{"neither", func(p *coordinator.Policy) { p.ConsecutiveFailures, p.FailureRatio = 0, 0 }, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := coordinator.DefaultPolicy()
			tc.edit(&p)
			k := newKnowledge(time.Second, time.Minute, p)
			_, row := k.use("s", instant.Now())
			for run := range 2 {
				var got *verdict
				for i := 1; i <= 3*max(tc.at, 10); i++ {
					v := k.failed("s")
					if (v != nil) != (i == tc.at) {
						t.Fatalf("run %d, failure %d: verdict %v; want one at failure %d alone", run, i, v != nil, tc.at)
					}
					if v != nil {
						got = v
					}
				}
				if got == nil {
					if tc.at != 0 {
						t.Fatalf("run %d: no verdict", run)
					}
					return
				}
				if row.verdict.Load() != got {
					t.Fatalf("run %d: the row does not hold the verdict its calls wait for", run)
				}
				got.release()
				select {
				case <-got.done:
				default:
					t.Fatalf("run %d: released, but its waiters still wait", run)
				}
				if row.verdict.Load() != nil {
					t.Fatalf("run %d: released, but the row still holds it", run)
				}
				row.succeeded()
			}
		})
	}
}

// TestVerdictWithoutAnAnswer: the coordinator never answers the Record
// that carries the failure a verdict waits for; the call that waits is
// decided once the coordinator timeout has passed, and the verdict is
// gone, so that the calls after it do not wait.
func TestVerdictWithoutAnAnswer(t *testing.T) {
	tc := newTestCoordinator(t, memory.New())
	stuck := make(chan struct{})
	defer close(stuck)
	tc.recordHook = func() { <-stuck }
	p := coordinator.DefaultPolicy()
	p.ConsecutiveFailures = 3
	const scope = "verdict"
	b := newBreaker(t, tc, WithPolicy(p), WithCoordinatorTimeout(20*time.Millisecond),
		WithScope(func(context.Context, string, string) string { return scope }))
	client := testgrpc.NewTestServiceClient(dial(t, serveTest(t, &dependency{}), b, grpc.WithChainUnaryInterceptor(sidecarDown)))
	ctx := context.Background()
	for i := range p.ConsecutiveFailures + 2 {
		if _, err := client.EmptyCall(ctx, &testpb.Empty{}); err == nil || errors.Is(err, ErrOpen) {
			t.Fatalf("call %d: %v; want the sidecar's failure", i, err)
		}
	}
	_, row := b.known.use(scope, instant.Now())
	if v := row.verdict.Load(); v != nil {
		t.Errorf("a verdict is still awaited after the coordinator timeout")
	}
}

// TestOneWaitPerCall: with the coordinator stuck (a paused Redis behind a
// default client), a call that waits for a verdict and would then ask for
// its admission waits the coordinator timeout once in all, not once for
// each; a dry-run replica, which rejects nothing, waits for no verdict
// (its admission, answered at once here, is all it waits for).
func TestOneWaitPerCall(t *testing.T) {
	for _, dry := range []bool{false, true} {
		t.Run(fmt.Sprintf("dry run %v", dry), func(t *testing.T) {
			tc := newTestCoordinator(t, memory.New())
			var stuck atomic.Bool
			tc.recordHook = func() {
				if stuck.Load() {
					<-tc.release
				}
			}
			p := coordinator.DefaultPolicy()
			p.ConsecutiveFailures = 3
			const scope, timeout = "one-wait", 300 * time.Millisecond
			opts := []Option{WithPolicy(p), WithCoordinatorTimeout(timeout),
				WithScope(func(context.Context, string, string) string { return scope })}
			if dry {
				opts = append(opts, WithDryRun())
			}
			b := newBreaker(t, tc, opts...)
			defer tc.unblock()
			client := testgrpc.NewTestServiceClient(dial(t, serveTest(t, &dependency{}), b, grpc.WithChainUnaryInterceptor(sidecarDown)))
			ctx := context.Background()
			for range p.ConsecutiveFailures - 1 {
				client.EmptyCall(ctx, &testpb.Empty{})
			}
			eventually(t, "the failures to be recorded", func() bool { return tc.recorded.Load() == int64(p.ConsecutiveFailures-1) })
			// The coordinator stops answering Records; the next failure
			// makes the run long enough for a verdict, which never comes;
			// then it stops answering anything.
			stuck.Store(true)
			client.EmptyCall(ctx, &testpb.Empty{})
			if !dry {
				tc.set(modeBlock)
			}
			t0 := time.Now()
			client.EmptyCall(ctx, &testpb.Empty{})
			waited := time.Since(t0)
			t.Logf("the call after the verdict's failure took %v (timeout %v)", waited, timeout)
			switch {
			case dry && waited >= timeout:
				t.Errorf("a dry-run replica's call took %v: it waited for a verdict", waited)
			case waited >= 2*timeout-50*time.Millisecond:
				t.Errorf("the call took %v: it waited for the verdict and then for its admission, %v each", waited, timeout)
			}
		})
	}
}
