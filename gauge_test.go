package cbgrpc

import (
	"context"
	"testing"
	"time"

	"github.com/cbgrpc/cbgrpc/coordinator"
	"github.com/cbgrpc/cbgrpc/coordinator/coordinatortest"
	"github.com/cbgrpc/cbgrpc/coordinator/memory"
)

// The cbgrpc.state gauge has a point per scope of the table, with the
// scope, valued as the table knows the state as of now; a forgotten scope
// has none.
func TestStateGauge(t *testing.T) {
	clk := coordinatortest.NewClock()
	_, tc := memoryWith(t, clk)
	mt := newMetrics()
	p := tripPolicy()
	b := newBreaker(t, tc, WithPolicy(p), WithMeterProvider(mt.mp))
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

	b.known.forget(time.Now().Add(2 * p.Window))
	if _, ok := gauge(); ok {
		t.Error("a point for a forgotten scope")
	}
}

// Isolated and disabled read 3 and 4.
func TestStateGaugeOfOperatorStates(t *testing.T) {
	mt := newMetrics()
	b := newBreaker(t, memory.New(), WithMeterProvider(mt.mp))
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
	if got["isolated"] != isolated || got["disabled"] != disabled || len(got) != 2 || isolated != 3 || disabled != 4 {
		t.Errorf("gauge %v, want isolated 3 and disabled 4", got)
	}
}

// Close stops observing: the gauge has no point after it.
func TestStateGaugeUnregisteredByClose(t *testing.T) {
	mt := newMetrics()
	b := newBreaker(t, memory.New(), WithMeterProvider(mt.mp))
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
