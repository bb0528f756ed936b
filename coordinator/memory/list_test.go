package memory_test

import (
	"context"
	"testing"
	"time"

	"github.com/cbgrpc/cbgrpc/coordinator"
)

// TestList lists the scopes that are born, sorted, and leaves out those
// that read as not born: forgotten, isolated for a time that has passed,
// or never used.
func TestList(t *testing.T) {
	c, clk := onFakeClock()
	ctx := context.Background()
	p := coordinator.Policy{Window: time.Second, Buckets: 10, ConsecutiveFailures: 2,
		OpenFor: time.Second, Probes: 1, ProbeLease: time.Second, ProbeSuccesses: 1}
	note := coordinator.Note{Reason: "listing"}
	// record admits a call per outcome, to learn their generation.
	record := func(scope string, failures ...bool) {
		t.Helper()
		var outcomes []coordinator.Outcome
		for _, f := range failures {
			d, err := c.Admit(ctx, coordinator.AdmitRequest{Scope: scope, Policy: p, Claim: ""})
			if err != nil {
				t.Fatal(err)
			}
			outcomes = append(outcomes, coordinator.Outcome{Generation: d.Generation, Failure: f})
		}
		if _, err := c.Record(ctx, coordinator.RecordRequest{Scope: scope, Policy: p, Outcomes: outcomes}); err != nil {
			t.Fatal(err)
		}
	}
	record("forgotten", false)
	c.Isolate(ctx, coordinator.CommandRequest{Scope: "isolation-ended", Policy: p, Note: coordinator.Note{Reason: "a moment", For: time.Millisecond}})
	clk.Advance(p.Window)
	record("b-closed", false, true)
	record("c-open", true, true)
	c.Isolate(ctx, coordinator.CommandRequest{Scope: "a-isolated", Policy: p, Note: note})
	c.Disable(ctx, coordinator.CommandRequest{Scope: "d-disabled", Policy: p, Note: note})
	list, err := c.List(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		scope string
		state coordinator.State
	}{{"a-isolated", coordinator.StateIsolated}, {"b-closed", coordinator.StateClosed}, {"c-open", coordinator.StateOpen}, {"d-disabled", coordinator.StateDisabled}}
	if len(list) != len(want) {
		t.Fatalf("List = %+v; want %v", list, want)
	}
	for i, w := range want {
		if list[i].Scope != w.scope || list[i].State != w.state {
			t.Errorf("List[%d] = %+v; want %s %v", i, list[i], w.scope, w.state)
		}
	}
	if list[1].Calls != 2 {
		t.Errorf("List: closed scope %+v; want its 2 calls", list[1])
	}
	if _, err := c.List(ctx, coordinator.Policy{}); err == nil {
		t.Error("List with an invalid policy: no error")
	}
}
