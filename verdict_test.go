package cbgrpc

import (
	"context"
	"errors"
	"testing"
	"time"

	"google.golang.org/grpc"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	testpb "google.golang.org/grpc/interop/grpc_testing"

	"github.com/cbgrpc/cbgrpc/coordinator"
	"github.com/cbgrpc/cbgrpc/coordinator/memory"
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
			_, row := k.use("s", instantNow())
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
	_, row := b.known.use(scope, instantNow())
	if v := row.verdict.Load(); v != nil {
		t.Errorf("a verdict is still awaited after the coordinator timeout")
	}
}
