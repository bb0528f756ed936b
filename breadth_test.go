package cbgrpc

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/status"

	"github.com/cbgrpc/cbgrpc/coordinator"
	cbredis "github.com/cbgrpc/cbgrpc/coordinator/redis"
	"github.com/cbgrpc/cbgrpc/internal/redistest"
)

// The trip decision of a fleet over a real Redis, at the default policy:
// replicas are Breakers of their own replica ID and go-redis client,
// calling a TestService on loopback. The figures of these runs, at full
// scale, come from bench/cmd/cbtripsim.

// dependency is a TestService whose calls fail at random with the share
// noise, or all while down.
type dependency struct {
	testgrpc.UnimplementedTestServiceServer
	mu     sync.Mutex
	noise  float64
	down   bool
	failed atomic.Int64
}

func (d *dependency) EmptyCall(context.Context, *testpb.Empty) (*testpb.Empty, error) {
	d.mu.Lock()
	fail := d.down || rand.Float64() < d.noise
	d.mu.Unlock()
	if fail {
		d.failed.Add(1)
		return nil, status.Error(codes.Unavailable, "dependency down")
	}
	return &testpb.Empty{}, nil
}

func (d *dependency) set(noise float64, down bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.noise, d.down = noise, down
}

// member is one replica of a test fleet.
type member struct {
	client   testgrpc.TestServiceClient
	rejected atomic.Int64
	failed   atomic.Int64 // its calls that failed, not rejected
	// failedBefore is failed at its first rejection; -1 until then.
	failedBefore atomic.Int64
}

// sidecarDown is an interceptor below the breaker that fails every call
// at once: a replica whose own network is broken.
func sidecarDown(context.Context, string, any, any, *grpc.ClientConn, grpc.UnaryInvoker, ...grpc.CallOption) error {
	return status.Error(codes.Unavailable, "sidecar: connection refused")
}

// newMember makes a replica named id over Redis srv, calling addr; broken
// puts sidecarDown below its breaker.
func newMember(t *testing.T, srv *redistest.Server, addr, id string, broken bool, opts ...Option) *member {
	t.Helper()
	b := newBreaker(t, cbredis.New(srv.Client(t)), append([]Option{WithReplicaID(id)}, opts...)...)
	var dopts []grpc.DialOption
	if broken {
		dopts = append(dopts, grpc.WithChainUnaryInterceptor(sidecarDown))
	}
	m := &member{client: testgrpc.NewTestServiceClient(dial(t, addr, b, dopts...))}
	m.failedBefore.Store(-1)
	return m
}

// fleetOf makes n healthy replicas named prefix-0 and on, and the period
// each calls at.
func fleetOf(t *testing.T, srv *redistest.Server, addr, prefix string, n int, period time.Duration, opts ...Option) ([]*member, []time.Duration) {
	var members []*member
	var periods []time.Duration
	for i := range n {
		members = append(members, newMember(t, srv, addr, fmt.Sprintf("%s-%d", prefix, i), false, opts...))
		periods = append(periods, period)
	}
	return members, periods
}

// calls has m call every period (0: in a tight loop, a millisecond apart
// after a rejection) until ctx ends. A call under way then ends as it
// would have: cut off by ctx, it would fail with DeadlineExceeded, a
// failure the dependency never made (under load, the healthy replicas'
// last calls of a warm-up were failures enough to make a failing replica
// look less than markedly worse than them).
func (m *member) calls(ctx context.Context, period time.Duration) {
	for ctx.Err() == nil {
		callCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		_, err := m.client.EmptyCall(callCtx, &testpb.Empty{})
		cancel()
		switch {
		case errors.Is(err, ErrOpen):
			m.rejected.Add(1)
			m.failedBefore.CompareAndSwap(-1, m.failed.Load())
			if period == 0 {
				time.Sleep(time.Millisecond)
			}
		case err != nil && ctx.Err() == nil:
			m.failed.Add(1)
		}
		if period > 0 {
			select {
			case <-ctx.Done():
			case <-time.After(period):
			}
		}
	}
}

// run has each member call at its period for d.
func run(d time.Duration, members []*member, periods []time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	var wg sync.WaitGroup
	for i, m := range members {
		wg.Go(func() { m.calls(ctx, periods[i]) })
	}
	wg.Wait()
}

// TestRedisOneReplicaFailingAloneIsAnOutlier: seven healthy replicas and
// one whose sidecar fails every call, in a tight loop: no healthy call is
// rejected, the coordinator finds the broken one an outlier on its own
// run of failures, and it rejects its own calls after exactly that many
// failures, however fast it calls (verdict.go): with the default policy,
// with ConsecutiveFailures 10, and with that rule off, where the failure
// ratio decides at MinCalls.
func TestRedisOneReplicaFailingAloneIsAnOutlier(t *testing.T) {
	for _, cf := range []int{coordinator.DefaultPolicy().ConsecutiveFailures, 10, 0} {
		t.Run(fmt.Sprint("consecutive-", cf), func(t *testing.T) {
			srv := redistest.Start(t)
			dep := &dependency{}
			addr := serveTest(t, dep)
			p := coordinator.DefaultPolicy()
			p.ConsecutiveFailures = cf
			want := cf
			if cf == 0 {
				want = p.MinCalls
			}
			const scope = "breadth/alone"
			// A verdict is waited for up to the coordinator timeout: a
			// busy test machine must not make it run out.
			opts := []Option{WithPolicy(p), WithScope(func(context.Context, string, string) string { return scope }),
				WithCoordinatorTimeout(time.Second)}
			members, periods := fleetOf(t, srv, addr, "healthy", 7, 20*time.Millisecond, opts...)
			// The healthy replicas are heard first: a replica heard alone is
			// its own fleet, and trips it.
			run(200*time.Millisecond, members, periods)
			// What the broken replica lost or was told, for a count that
			// is not exact.
			mt := newMetrics()
			var told transitions
			bad := newMember(t, srv, addr, "broken", true, append(opts, WithMeterProvider(mt.mp), WithOnTransition(told.tell))...)
			run(2*time.Second, append(members, bad), append(periods, 0))

			for i, m := range members {
				if n := m.rejected.Load(); n != 0 {
					t.Errorf("healthy replica %d: %d calls rejected; want none", i, n)
				}
			}
			before := bad.failedBefore.Load()
			t.Logf("the broken replica failed %d calls before its first rejection, then %d rejected", before, bad.rejected.Load())
			if before != int64(want) {
				spell, _ := told.find(func(tt coordinator.Transition) bool { return tt.Replica == "broken" })
				t.Errorf("the broken replica failed %d calls before it rejected; want %d (its outcomes dropped %d, coordinator errors %d, stalls %d; its first transition %+v)",
					before, want, mt.sum(t, "cbgrpc.outcomes.dropped"), mt.sum(t, "cbgrpc.coordinator.errors"), mt.sum(t, "cbgrpc.stalls"), spell)
			}
			s, err := cbredis.New(srv.Client(t)).Snapshot(context.Background(), scope, p)
			if err != nil {
				t.Fatal(err)
			}
			if s.State != coordinator.StateClosed || len(s.Outliers) != 1 || s.Outliers[0].Replica != "broken" {
				t.Errorf("snapshot %v, outliers %+v; want closed, with the broken replica an outlier", s.State, s.Outliers)
			}
			t.Logf("outliers %+v, window %d calls %d failures", s.Outliers, s.Calls, s.Failures)
		})
	}
}

// TestRedisFleetStopsADeadDependencyAfterAHealthySpell: eight replicas
// call a dependency with 5 % noise, then it fails every call: the fleet's
// run of failures, judged without its most failing replica, trips it
// within MinCalls + 3 x replicas failing calls, though the window is
// full of successes.
func TestRedisFleetStopsADeadDependencyAfterAHealthySpell(t *testing.T) {
	srv := redistest.Start(t)
	dep := &dependency{}
	dep.set(0.05, false)
	addr := serveTest(t, dep)
	p := coordinator.DefaultPolicy()
	const scope = "breadth/onset"
	var told transitions
	opts := []Option{WithPolicy(p), WithScope(func(context.Context, string, string) string { return scope }), WithOnTransition(told.tell)}
	members, periods := fleetOf(t, srv, addr, "replica", 8, 20*time.Millisecond, opts...)
	run(3*time.Second, members, periods)
	for i, m := range members {
		if n := m.rejected.Load(); n != 0 {
			t.Fatalf("replica %d: %d calls rejected in the healthy spell; want none", i, n)
		}
	}
	spell := dep.failed.Load()
	dep.set(0, true)
	run(2*time.Second, members, periods)
	absorbed := dep.failed.Load() - spell
	for i, m := range members {
		if m.rejected.Load() == 0 {
			t.Errorf("replica %d never rejected a call of the dead dependency", i)
		}
	}
	// Counted to each replica's first rejection: afterwards the breaker
	// probes.
	var beforeStop int64
	for _, m := range members {
		beforeStop += m.failedBefore.Load()
	}
	beforeStop -= spell
	tr, ok := told.find(func(tt coordinator.Transition) bool {
		return tt.Replica == "" && tt.From == coordinator.StateClosed && tt.To == coordinator.StateOpen
	})
	t.Logf("noise failed %d calls; once down, %d failing calls reached the dependency before every replica rejected (%d in all); trip: %q",
		spell, beforeStop, absorbed, tr.Reason)
	if !ok || !strings.HasPrefix(tr.Reason, "consecutive failures") {
		t.Errorf("the trip %+v; want the fleet's run of failures", tr)
	}
	if bound := int64(p.MinCalls + 3*len(members)); beforeStop > bound {
		t.Errorf("%d failing calls before every replica rejected; want at most MinCalls + 3 x replicas, %d", beforeStop, bound)
	}
}

// TestRedisSmallFleetsTrip: one replica is its own fleet, and two that
// both fail trip it.
func TestRedisSmallFleetsTrip(t *testing.T) {
	for _, n := range []int{1, 2} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			srv := redistest.Start(t)
			dep := &dependency{}
			addr := serveTest(t, dep)
			p := coordinator.DefaultPolicy()
			// No probe within the run: the last trip is the first one.
			p.OpenFor = 5 * time.Second
			scope := fmt.Sprintf("breadth/small-%d", n)
			opts := []Option{WithPolicy(p), WithScope(func(context.Context, string, string) string { return scope })}
			members, periods := fleetOf(t, srv, addr, "replica", n, 10*time.Millisecond, opts...)
			// A healthy spell of more successes than a run: a loaded host
			// made 17 calls in 300 ms, and 17 failures then tipped the ratio
			// before the run could.
			run(time.Second, members, periods)
			dep.set(0, true)
			run(2*time.Second, members, periods)
			s, err := cbredis.New(srv.Client(t)).Snapshot(context.Background(), scope, p)
			if err != nil {
				t.Fatal(err)
			}
			if s.LastTrip.Reason == "" || !strings.HasPrefix(s.LastTrip.Reason, "consecutive failures") {
				t.Errorf("last trip %+v; want the fleet's run of failures", s.LastTrip)
			}
			for i, m := range members {
				if m.rejected.Load() == 0 {
					t.Errorf("replica %d never rejected a call", i)
				}
			}
		})
	}
}
