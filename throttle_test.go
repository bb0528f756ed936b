package cbgrpc

import (
	"context"
	"errors"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/status"

	"github.com/cbgrpc/cbgrpc/coordinator"
	"github.com/cbgrpc/cbgrpc/coordinator/coordinatortest"
	"github.com/cbgrpc/cbgrpc/coordinator/memory"
	cbredis "github.com/cbgrpc/cbgrpc/coordinator/redis"
	"github.com/cbgrpc/cbgrpc/internal/redistest"
)

func TestThrottleShare(t *testing.T) {
	p := coordinator.DefaultPolicy() // MinCalls 20
	p.Throttle, p.FailureRatio = 2, 0.8
	off := coordinator.DefaultPolicy()
	consecutive := p
	consecutive.ConsecutiveFailures = 50
	for _, c := range []struct {
		what string
		p    coordinator.Policy
		w    window
		want float64
	}{
		{"off", off, window{calls: 100, failures: 100}, 0},
		{"healthy", p, window{calls: 100}, 0},
		{"half accepted, K 2: nothing rejected", p, window{calls: 100, failures: 50}, 0},
		{"40 of 100 accepted", p, window{calls: 100, failures: 60}, (100 - 80) / 101.0},
		{"throttled requests count as requests", p, window{calls: 80, failures: 40, throttled: 20}, (100 - 80) / 101.0},
		{"slow calls are accepted", p, window{calls: 100, failures: 50, slow: 50}, 0},
		{"every call failed", p, window{calls: 20, failures: 20, throttled: 1000}, 1020 / 1021.0},
		{"fewer calls than MinCalls", p, window{calls: 19, failures: 19, throttled: 1000}, 0},
		{"fewer calls than ConsecutiveFailures", consecutive, window{calls: 49, failures: 49}, 0},
	} {
		if got := throttleShare(&c.p, &c.w); math.Abs(got-c.want) > 1e-12 {
			t.Errorf("%s: throttleShare(%+v) = %v; want %v", c.what, c.w, got, c.want)
		}
	}
}

// TestThrottledCallIsRejectedAndCounted: a Breaker that has learned from
// its Record answer that the fleet's window holds many requests and few
// accepts rejects calls locally, with ErrOpen saying throttled, decided by
// "throttle" in telemetry with a rejected-call span, and counts each in the
// window as a throttled request, never as a call.
func TestThrottledCallIsRejectedAndCounted(t *testing.T) {
	clk := coordinatortest.NewClock()
	c := memory.New(memory.WithClock(clk.Now))
	p := coordinator.DefaultPolicy()
	// No failure-ratio rule, so that the window's failures cannot trip it.
	p.FailureRatio, p.MinCalls, p.SlowCallDuration, p.SlowCallRatio, p.ConsecutiveFailures = 0, 5, time.Hour, 0.5, 0
	p.Throttle = 2
	const scope = "throttled-one"
	ctx := context.Background()
	// Another replica saw 10 calls fail and throttled 1000 requests.
	d, err := c.Admit(ctx, coordinator.AdmitRequest{Scope: scope, Policy: p, Claim: "other"})
	if err != nil {
		t.Fatal(err)
	}
	others := make([]coordinator.Outcome, 0, 1010)
	for range 10 {
		others = append(others, coordinator.Outcome{Generation: d.Generation, Failure: true})
	}
	for range 1000 {
		others = append(others, coordinator.Outcome{Generation: d.Generation, Throttled: true})
	}
	if _, err := c.Record(ctx, coordinator.RecordRequest{Scope: scope, Policy: p, Outcomes: others}); err != nil {
		t.Fatal(err)
	}

	tr, mt := newTracing(), newMetrics()
	b := newBreaker(t, c, WithPolicy(p), WithRecordInterval(time.Millisecond), WithTracerProvider(tr.tp), WithMeterProvider(mt.mp),
		WithScope(func(context.Context, string, string) string { return scope }))
	svc := &service{}
	client := testgrpc.NewTestServiceClient(dial(t, serveTest(t, svc), b))
	if _, err := client.EmptyCall(ctx, &testpb.Empty{}); err != nil {
		t.Fatalf("the first call, before any Record answer: %v", err)
	}
	eventually(t, "the Record answer to be learned", func() bool {
		return factOf(b, scope).window.throttled == 1000
	})

	reached := svc.calls.Load()
	throttled := 0
	for range 20 {
		_, err := client.EmptyCall(ctx, &testpb.Empty{})
		var oe *OpenError
		if !errors.As(err, &oe) {
			continue
		}
		throttled++
		if !errors.Is(err, ErrOpen) || status.Code(err) != codes.Unavailable || oe.State != coordinator.StateClosed ||
			oe.RetryAfter != 0 || !strings.HasPrefix(oe.Reason, "throttled, 99% of calls rejected") {
			t.Errorf("a throttled call: %v (%+v); want ErrOpen, Unavailable, closed, saying throttled", err, oe)
		}
	}
	// Each call is throttled with probability 1011/1012 or more: 15 of 20
	// is beyond doubt.
	if throttled < 15 {
		t.Fatalf("%d of 20 calls throttled; want nearly all", throttled)
	}
	if got := svc.calls.Load() - reached; got != int64(20-throttled) {
		t.Errorf("%d calls reached the server; want the %d not throttled", got, 20-throttled)
	}
	if got := mt.sum(t, "cbgrpc.decisions", attrSource.String("throttle"), attrVerdict.String("reject")); got != int64(throttled) {
		t.Errorf("reject decisions by throttle = %d; want %d", got, throttled)
	}
	spans := 0
	for _, s := range tr.spans("grpc.testing.TestService/EmptyCall") {
		if v, _ := attr(s, attrSource); v.AsString() == "throttle" {
			spans++
		}
	}
	if spans != throttled {
		t.Errorf("%d rejected-call spans decided by throttle; want %d", spans, throttled)
	}
	eventually(t, "the throttled requests to be counted", func() bool {
		s, err := c.Snapshot(ctx, scope, p)
		return err == nil && s.Throttled == 1000+throttled && s.Calls == 10+21-throttled
	})
}

// capacityService is a dependency that serves at most a set number of
// calls per round, failing the rest with Unavailable: overloaded, it
// accepts a fixed share of what a fleet offers it.
type capacityService struct {
	testgrpc.UnimplementedTestServiceServer
	budget           atomic.Int64
	reached, served  atomic.Int64
	unlimited, dying atomic.Bool
}

func (s *capacityService) EmptyCall(context.Context, *testpb.Empty) (*testpb.Empty, error) {
	s.reached.Add(1)
	if !s.dying.Load() && (s.unlimited.Load() || s.budget.Add(-1) >= 0) {
		s.served.Add(1)
		return &testpb.Empty{}, nil
	}
	return nil, status.Error(codes.Unavailable, "overloaded")
}

// throttleFleet is replicas Breakers over one coordinator on a fake clock,
// each calling the same capacityService, in rounds: every round each
// replica offers perReplica calls, then the test waits until the
// coordinator has counted every outcome of the round, and the clock moves
// on by a bucket. So a window is p.Buckets rounds, whatever the speed of
// the machine.
type throttleFleet struct {
	t       *testing.T
	c       coordinator.Coordinator
	clk     *coordinatortest.Clock
	p       coordinator.Policy
	svc     *capacityService
	clients []testgrpc.TestServiceClient
	// offered is what each round offered, newest last, to know what the
	// window must hold.
	offered []int
	// throttledSeen counts the rejections that said they were throttled.
	throttledSeen atomic.Int64
}

const (
	throttleScope      = "throttled"
	throttleReplicas   = 6
	throttlePerReplica = 10
	throttleOffered    = throttleReplicas * throttlePerReplica
)

func newThrottleFleet(t *testing.T, c coordinator.Coordinator, clk *coordinatortest.Clock) *throttleFleet {
	f := &throttleFleet{t: t, c: c, clk: clk, p: throttlePolicy(), svc: &capacityService{}}
	f.svc.unlimited.Store(true)
	addr := serveTest(t, f.svc)
	for range throttleReplicas {
		// A coordinator timeout far above a script's time even under the
		// race detector: a call let through by the failure policy has no
		// outcome, and every round's outcomes must reach the window.
		b := newBreaker(t, c, WithPolicy(f.p), WithRecordInterval(time.Millisecond), WithCoordinatorTimeout(time.Second),
			WithScope(func(context.Context, string, string) string { return throttleScope }))
		f.clients = append(f.clients, testgrpc.NewTestServiceClient(dial(t, addr, b)))
	}
	return f
}

// roundResult is what one round did.
type roundResult struct {
	admitted, accepted, throttled int
	open                          bool // the breaker opened in the round
}

// round runs one round with the server serving capacity calls (-1: all)
// and returns what happened.
func (f *throttleFleet) round(capacity int) roundResult {
	f.t.Helper()
	f.svc.unlimited.Store(capacity < 0)
	f.svc.budget.Store(int64(capacity))
	reached, served := f.svc.reached.Load(), f.svc.served.Load()
	var throttled, rejected atomic.Int64
	var wg sync.WaitGroup
	for _, client := range f.clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range throttlePerReplica {
				_, err := client.EmptyCall(context.Background(), &testpb.Empty{})
				var oe *OpenError
				if errors.As(err, &oe) {
					rejected.Add(1)
					if strings.HasPrefix(oe.Reason, "throttled") {
						throttled.Add(1)
					}
				}
			}
		}()
	}
	wg.Wait()
	f.throttledSeen.Add(throttled.Load())
	r := roundResult{admitted: int(f.svc.reached.Load() - reached), accepted: int(f.svc.served.Load() - served), throttled: int(throttled.Load())}
	if r.admitted+int(rejected.Load()) != throttleOffered {
		f.t.Fatalf("a round of %d calls: %d admitted, %d rejected", throttleOffered, r.admitted, rejected.Load())
	}
	// Every admitted call and throttled request of the round counts in the
	// window before the clock moves on, unless the breaker opened.
	f.offered = append(f.offered, r.admitted+r.throttled)
	want := 0
	for _, n := range f.offered[max(0, len(f.offered)-f.p.Buckets):] {
		want += n
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		s, err := f.c.Snapshot(context.Background(), throttleScope, f.p)
		if err != nil {
			f.t.Fatal(err)
		}
		if s.State != coordinator.StateClosed {
			r.open, f.offered = true, nil
			break
		}
		if s.Calls+s.Throttled == want {
			break
		}
		if time.Now().After(deadline) {
			f.t.Fatalf("the window holds %d requests (%d calls, %d throttled); want %d", s.Calls+s.Throttled, s.Calls, s.Throttled, want)
		}
		time.Sleep(200 * time.Microsecond)
	}
	f.clk.Advance(f.p.BucketWidth())
	return r
}

// testThrottleFleet: the fleet sends the dependency all its calls while it
// is healthy; once it serves only 40% of what is offered, what reaches it
// converges to K × what it accepts; it gets everything again within a
// window of its recovery; and when it fails every call the trip rules
// still open the breaker.
func testThrottleFleet(t *testing.T, c coordinator.Coordinator, clk *coordinatortest.Clock) {
	f := newThrottleFleet(t, c, clk)
	window := f.p.Buckets
	for i := range window {
		if r := f.round(-1); r.admitted != throttleOffered {
			t.Fatalf("healthy round %d: %d of %d admitted; want all", i, r.admitted, throttleOffered)
		}
	}

	// Overloaded: 24 of the 60 offered calls a round are served. Three
	// windows to converge, the fourth measured.
	capacity := throttleOffered * 4 / 10
	for range 3 * window {
		if r := f.round(capacity); r.open {
			t.Fatal("the breaker opened under overload; the failure ratio holds at about 50%, under 80%")
		}
	}
	admitted, accepted, throttled := 0, 0, 0
	for range window {
		r := f.round(capacity)
		admitted, accepted, throttled = admitted+r.admitted, accepted+r.accepted, throttled+r.throttled
	}
	ratio := float64(admitted) / float64(accepted)
	t.Logf("overloaded, over the last window: offered %d, admitted %d, accepted %d, throttled %d: admitted %.2f × accepted (K %v)",
		window*throttleOffered, admitted, accepted, throttled, ratio, f.p.Throttle)
	// The tolerance: the fleet draws 60 times a round at p ≈ 0.2, so a
	// window's admitted calls vary by about ±√(1200 × 0.16) ≈ 14 of 960
	// (1.5%), and each replica throttles by what its last Record said, up
	// to a round old; ±10% of K is beyond both.
	if math.Abs(ratio-f.p.Throttle) > 0.1*f.p.Throttle {
		t.Errorf("admitted %.2f × accepted; want K = %v within 10%%", ratio, f.p.Throttle)
	}
	if accepted != window*capacity {
		t.Errorf("accepted %d; want the capacity, %d: the throttle must not starve the dependency", accepted, window*capacity)
	}

	// Recovered: within a window, every call goes through again, and stays
	// so.
	full := -1
	for i := range window {
		if r := f.round(-1); r.admitted == throttleOffered && full < 0 {
			full = i
		} else if r.admitted != throttleOffered {
			full = -1
		}
	}
	t.Logf("recovered: every call admitted from round %d after the recovery on", full)
	if full < 0 || full > window/2 {
		t.Errorf("after the recovery, every call admitted from round %d on; want within half a window (%d rounds), and to stay so", full, window/2)
	}

	// Failing every call: the throttle rejects more and more, but leaves
	// the trip rules the calls they need.
	f.svc.dying.Store(true)
	opened := -1
	for i := range 2 * window {
		if f.round(0).open {
			opened = i
			break
		}
	}
	t.Logf("failing: the breaker opened in round %d", opened)
	if opened < 0 {
		t.Fatalf("the dependency failed every call for %d rounds, and the breaker never opened", 2*window)
	}
	// The recent rule judges the failures the throttle let through before
	// the window's ratio does; either is a trip by the share of failures.
	if s, _ := c.Snapshot(context.Background(), throttleScope, f.p); !strings.HasPrefix(s.LastTrip.Reason, "recent failures") && !strings.HasPrefix(s.LastTrip.Reason, "failures") {
		t.Errorf("last trip %+v; want the share of failures, recent or over the window", s.LastTrip)
	}
	if f.throttledSeen.Load() == 0 {
		t.Error("no call was throttled")
	}
}

func TestThrottleFleetMemory(t *testing.T) {
	clk := coordinatortest.NewClock()
	testThrottleFleet(t, memory.New(memory.WithClock(clk.Now)), clk)
}

func TestThrottleFleetRedis(t *testing.T) {
	clk := coordinatortest.NewClock()
	testThrottleFleet(t, cbredis.New(redistest.Start(t).Client(t), cbredis.WithClock(clk.Now)), clk)
}
