package cbgrpc

import (
	"context"
	"maps"
	"testing"

	"github.com/cbgrpc/cbgrpc/coordinator"
	"github.com/cbgrpc/cbgrpc/coordinator/coordinatortest"
	"github.com/cbgrpc/cbgrpc/coordinator/memory"
	"github.com/cbgrpc/cbgrpc/internal/instant"
)

// With the scope, the cbgrpc.state gauge is a state set: a point per
// scope of the table and state, 1 for the state the table knows as of now
// and 0 for the others; a forgotten scope has none.
func TestStateGauge(t *testing.T) {
	clk := coordinatortest.NewClock()
	_, tc := memoryWith(t, clk)
	mt := newMetrics()
	p := tripPolicy()
	b := newBreaker(t, tc, WithPolicy(p), WithMeterProvider(mt.mp), WithScopeInMetrics())
	calls := newTracedCalls(t, b, nil)
	scope := calls.scope
	gauge := func() (coordinator.State, bool) {
		s, ok := mt.states(t)[scope]
		return s, ok
	}
	if _, ok := gauge(); ok {
		t.Fatal("a point before any call")
	}

	calls.call("ok", false)
	if s, ok := gauge(); !ok || s != closed {
		t.Errorf("after a success: %v (%v), want closed", s, ok)
	}
	calls.call("fails", true)
	eventually(t, "open", func() bool { s, _ := gauge(); return s == open })

	clk.Advance(p.OpenFor)
	probe, err := admitCall(b, context.Background(), &call{scope: scope, method: testMethod})
	if err != nil || probe.fate != probing {
		t.Fatalf("probe: %+v, %v", probe, err)
	}
	if s, _ := gauge(); s != halfOpen {
		t.Errorf("with a probe out: %v, want half-open", s)
	}
	b.finish(context.Background(), probe, nil)
	eventually(t, "closed", func() bool { s, _ := gauge(); return s == closed })

	b.known.forget(instant.Now().Add(2 * p.Window))
	if _, ok := gauge(); ok {
		t.Error("a point for a forgotten scope")
	}
}

// Isolated and disabled are states of the set like the others.
func TestStateGaugeOfOperatorStates(t *testing.T) {
	mt := newMetrics()
	b := newBreaker(t, memory.New(), WithMeterProvider(mt.mp), WithScopeInMetrics())
	ctx := context.Background()
	// In use: the table keeps no row of an unused scope that admits calls.
	admitCall(b, ctx, &call{scope: "disabled", method: testMethod})
	if _, err := b.Isolate(ctx, "isolated", coordinator.Note{Reason: "test"}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Disable(ctx, "disabled", coordinator.Note{Reason: "test"}); err != nil {
		t.Fatal(err)
	}
	got := mt.states(t)
	if got["isolated"] != isolated || got["disabled"] != disabled || len(got) != 2 {
		t.Errorf("gauge %v, want isolated and disabled", got)
	}
}

// Close stops observing: the gauge has no point after it.
func TestStateGaugeUnregisteredByClose(t *testing.T) {
	mt := newMetrics()
	b := newBreaker(t, memory.New(), WithMeterProvider(mt.mp), WithScopeInMetrics())
	if _, err := b.Isolate(context.Background(), "isolated", coordinator.Note{Reason: "test"}); err != nil {
		t.Fatal(err)
	}
	if len(mt.states(t)) != 1 {
		t.Fatal("no point before Close")
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if got := mt.states(t); len(got) != 0 {
		t.Errorf("gauge after Close: %v", got)
	}
}

// Without the scope, the gauge counts the scopes in each state, a point per
// state: what a sum across replicas or Breakers adds up right. Named
// Breakers in one process make series of their own.
func TestStateGaugeCountsByStateAndBreaker(t *testing.T) {
	mt := newMetrics()
	ctx := context.Background()
	for _, name := range []string{"payments", "inventory"} {
		b := newBreaker(t, memory.New(), WithMeterProvider(mt.mp), WithName(name))
		b.admit(ctx, routed(b, &call{scope: "in use", method: testMethod}))
		if _, err := b.Isolate(ctx, "isolated", coordinator.Note{Reason: "test"}); err != nil {
			t.Fatal(err)
		}
		if name == "payments" {
			if _, err := b.Isolate(ctx, "isolated too", coordinator.Note{Reason: "test"}); err != nil {
				t.Fatal(err)
			}
		}
	}
	got := make(map[string]int64)
	for _, dp := range mt.statePoints(t) {
		if _, ok := dp.Attributes.Value(attrScope); ok {
			t.Fatalf("a point with the scope: %v", dp.Attributes.ToSlice())
		}
		key := must(dp.Attributes.Value(attrBreaker)).AsString() + "/" + stateNamed(t, dp.Attributes).String()
		if _, dup := got[key]; dup {
			t.Fatalf("two points for %s", key)
		}
		got[key] = dp.Value
	}
	want := map[string]int64{
		"payments/closed": 1, "payments/isolated": 2, "inventory/closed": 1, "inventory/isolated": 1,
		"payments/open": 0, "payments/half-open": 0, "payments/disabled": 0,
		"inventory/open": 0, "inventory/half-open": 0, "inventory/disabled": 0,
	}
	if !maps.Equal(got, want) {
		t.Errorf("cbgrpc.state by breaker/state: %v\nwant %v", got, want)
	}
}
