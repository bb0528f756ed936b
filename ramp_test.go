package cbgrpc

import (
	"context"
	"errors"
	"math"
	"strings"
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
	"github.com/cbgrpc/cbgrpc/internal/instant"
	"github.com/cbgrpc/cbgrpc/internal/redistest"
)

func TestRampShareRisesFromTheFloor(t *testing.T) {
	ramp := 10 * time.Second
	for _, c := range []struct {
		left time.Duration
		want float64
	}{{ramp, rampFloor}, {ramp * 3 / 4, rampFloor + (1-rampFloor)/4}, {ramp / 2, rampFloor + (1-rampFloor)/2}, {0, 1}, {2 * ramp, rampFloor}} {
		if got := rampShare(c.left, ramp); math.Abs(got-c.want) > 1e-9 {
			t.Errorf("rampShare(%v of %v) = %v; want %v", c.left, ramp, got, c.want)
		}
	}
}

// recoverScope takes scope, tripped, through its open period and one
// successful probe to closed, on c at clk's time, and returns the time of
// the close.
func recoverScope(t *testing.T, c coordinator.Coordinator, clk *coordinatortest.Clock, scope string, p coordinator.Policy) time.Time {
	t.Helper()
	ctx := context.Background()
	gen := tripScope(t, c, scope, p)
	clk.Advance(p.OpenFor)
	if d, err := c.Admit(ctx, coordinator.AdmitRequest{Scope: scope, Policy: p, Claim: "prober"}); err != nil || d.Verdict != coordinator.Probe {
		t.Fatalf("probe: %+v, %v", d, err)
	}
	res, err := c.Settle(ctx, coordinator.SettleRequest{Scope: scope, Policy: p, Claim: "prober", Outcome: coordinator.Outcome{Generation: gen}})
	if err != nil || res.State != coordinator.StateClosed || res.RampLeft != p.RampFor {
		t.Fatalf("closing probe: %+v, %v; want closed with the whole ramp left", res, err)
	}
	return clk.Now()
}

// TestRampAdmitsARisingShareAcrossBreakers: four Breakers over one
// coordinator on a fake clock, asking it on every call: at 25%, 50% and
// 75% of the ramp, the share of calls admitted is the ramp's, within 6
// points (800 calls: 4 standard deviations), and the calls rejected never
// reach the server and say why.
func TestRampAdmitsARisingShareAcrossBreakers(t *testing.T) {
	clk := coordinatortest.NewClock()
	c := memory.New(memory.WithClock(clk.Now))
	p := rampPolicy()
	const scope = "inventory"
	svc := &service{}
	addr := serveTest(t, svc)
	var clients []testgrpc.TestServiceClient
	for range 4 {
		b := newBreaker(t, c, WithPolicy(p), WithAdmissionCache(0),
			WithScope(func(context.Context, string, string) string { return scope }))
		clients = append(clients, testgrpc.NewTestServiceClient(dial(t, addr, b)))
	}
	closed := recoverScope(t, c, clk, scope, p)
	ctx := context.Background()
	for _, at := range []float64{0.25, 0.5, 0.75} {
		clk.Set(closed.Add(time.Duration(at * float64(p.RampFor))))
		want := rampFloor + (1-rampFloor)*at
		reached := svc.calls.Load()
		admitted := 0
		for i := range 800 {
			_, err := clients[i%4].EmptyCall(ctx, &testpb.Empty{})
			var oe *OpenError
			switch {
			case err == nil:
				admitted++
			case errors.As(err, &oe) && strings.Contains(oe.Reason, "ramping") && oe.State == coordinator.StateClosed && oe.RetryAfter > 0:
			default:
				t.Fatalf("call at %.0f%% of the ramp: %v; want admitted, or rejected for the ramp", at*100, err)
			}
		}
		got := float64(admitted) / 800
		t.Logf("at %.0f%% of the ramp: %.1f%% of 800 calls admitted across 4 Breakers, want %.1f%%", at*100, got*100, want*100)
		if math.Abs(got-want) > 0.06 {
			t.Errorf("at %.0f%% of the ramp: %.1f%% admitted; want %.1f%% within 6 points", at*100, got*100, want*100)
		}
		if n := svc.calls.Load() - reached; n != int64(admitted) {
			t.Errorf("%d calls reached the server, %d admitted: a rejected call went through", n, admitted)
		}
	}
	clk.Set(closed.Add(p.RampFor))
	for i := range 40 {
		if _, err := clients[i%4].EmptyCall(ctx, &testpb.Empty{}); err != nil {
			t.Fatalf("after the ramp: %v; want every call admitted", err)
		}
	}
}

// TestRedisRampInStep: replicas over Redis that learn of a recovery at
// different times, from the feed or from an answer a while later, ramp in
// step: they agree on when the ramp ends, and it is the coordinator's.
func TestRedisRampInStep(t *testing.T) {
	srv := redistest.Start(t)
	p := rampPolicy()
	p.OpenFor = 200 * time.Millisecond
	const scope = "inventory"
	svc := &service{}
	addr := serveTest(t, svc)
	ctx := context.Background()
	newReplica := func() (*Breaker, testgrpc.TestServiceClient) {
		b := newBreaker(t, cbredis.New(srv.Client(t)), WithPolicy(p),
			WithScope(func(context.Context, string, string) string { return scope }))
		return b, testgrpc.NewTestServiceClient(dial(t, addr, b))
	}
	var early []*Breaker
	for range 3 {
		b, client := newReplica()
		client.EmptyCall(ctx, &testpb.Empty{}) // follows the scope on its feed
		early = append(early, b)
	}
	ops := cbredis.New(srv.Client(t))
	for _, b := range early {
		eventually(t, "the feed to follow the scope", func() bool {
			epoch, _ := b.known.begin(scope)
			return epoch != 0
		})
	}
	// Trip and recover on the coordinator's own clock, as another
	// replica would.
	gen := tripScope(t, ops, scope, p)
	time.Sleep(p.OpenFor)
	if d, err := ops.Admit(ctx, coordinator.AdmitRequest{Scope: scope, Policy: p, Claim: "prober"}); err != nil || d.Verdict != coordinator.Probe {
		t.Fatalf("probe: %+v, %v", d, err)
	}
	res, err := ops.Settle(ctx, coordinator.SettleRequest{Scope: scope, Policy: p, Claim: "prober", Outcome: coordinator.Outcome{Generation: gen}})
	closedAt := instant.Now()
	if err != nil || res.RampLeft != p.RampFor {
		t.Fatalf("closing probe: %+v, %v", res, err)
	}
	for _, b := range early {
		eventually(t, "the recovery heard on the feed", func() bool {
			f := factOf(b, scope)
			return f.state == coordinator.StateClosed && !f.rampEnd.IsZero()
		})
	}
	time.Sleep(300 * time.Millisecond)
	late, client := newReplica()
	client.EmptyCall(ctx, &testpb.Empty{}) // asks the coordinator, which says what is left
	ends := []instant.Time{}
	for _, b := range append(early, late) {
		ends = append(ends, factOf(b, scope).rampEnd)
	}
	want := closedAt.Add(p.RampFor)
	for i, end := range ends {
		t.Logf("replica %d: ramp ends %v after the close (want %v)", i+1, end.Sub(closedAt).Round(time.Millisecond), p.RampFor)
		if d := end.Sub(want); d < -100*time.Millisecond || d > 100*time.Millisecond {
			t.Errorf("replica %d: its ramp ends %v from the coordinator's; want within 100ms", i+1, d.Round(time.Millisecond))
		}
	}
}

// TestFailuresDuringTheRampReopen: the calls the ramp admits count as
// usual; when they fail, the breaker opens again, and the next calls are
// rejected as open, not as ramping.
func TestFailuresDuringTheRampReopen(t *testing.T) {
	clk := coordinatortest.NewClock()
	c := memory.New(memory.WithClock(clk.Now))
	p := rampPolicy()
	const scope = "inventory"
	svc := &service{}
	b := newBreaker(t, c, WithPolicy(p), WithAdmissionCache(0),
		WithScope(func(context.Context, string, string) string { return scope }))
	client := testgrpc.NewTestServiceClient(dial(t, serveTest(t, svc), b))
	closed := recoverScope(t, c, clk, scope, p)
	clk.Set(closed.Add(p.RampFor / 2))
	svc.setErr(status.Error(codes.Unavailable, "down again"))
	ctx := context.Background()
	var oe *OpenError
	eventually(t, "the breaker to reopen during the ramp", func() bool {
		_, err := client.EmptyCall(ctx, &testpb.Empty{})
		return errors.As(err, &oe) && oe.State == coordinator.StateOpen
	})
	if s, err := c.Snapshot(ctx, scope, p); err != nil || s.State != coordinator.StateOpen || s.LastTrip.Failures == 0 {
		t.Errorf("after failures during the ramp: %+v, %v; want open by the failures counted", s, err)
	}
}
