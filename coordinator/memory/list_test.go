package memory

import (
	"context"
	"testing"
	"time"

	"github.com/cbgrpc/cbgrpc/coordinator"
)

func TestList(t *testing.T) {
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	c := New(WithClock(func() time.Time { return now }))
	ctx := context.Background()
	p := coordinator.Policy{Window: time.Second, Buckets: 10, ConsecutiveFailures: 2,
		OpenFor: time.Second, Probes: 1, ProbeLease: time.Second, ProbeSuccesses: 1}
	note := coordinator.Note{Reason: "listing"}
	if _, err := c.Record(ctx, "forgotten", p, []coordinator.Outcome{{}}); err != nil {
		t.Fatal(err)
	}
	now = now.Add(p.Window)
	c.Record(ctx, "b-closed", p, []coordinator.Outcome{{}, {Failure: true}})
	c.Record(ctx, "c-open", p, []coordinator.Outcome{{Failure: true}, {Failure: true}})
	c.Isolate(ctx, "a-isolated", p, note)
	c.Disable(ctx, "d-disabled", p, note)
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
