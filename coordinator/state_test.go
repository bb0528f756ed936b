package coordinator_test

import (
	"context"
	"testing"

	"github.com/cbgrpc/cbgrpc/coordinator"
)

func TestStateString(t *testing.T) {
	for s, want := range map[coordinator.State]string{
		coordinator.StateClosed: "closed", coordinator.StateOpen: "open", coordinator.StateHalfOpen: "half-open",
		coordinator.StateIsolated: "isolated", coordinator.StateDisabled: "disabled", 7: "State(7)",
	} {
		if got := s.String(); got != want {
			t.Errorf("State(%d).String() = %q; want %q", int(s), got, want)
		}
	}
}

func TestVerdictString(t *testing.T) {
	for v, want := range map[coordinator.Verdict]string{
		coordinator.Allow: "allow", coordinator.Probe: "probe", coordinator.Reject: "reject", -1: "Verdict(-1)",
	} {
		if got := v.String(); got != want {
			t.Errorf("Verdict(%d).String() = %q; want %q", int(v), got, want)
		}
	}
}

func TestBatchID(t *testing.T) {
	ctx := context.Background()
	if got := coordinator.BatchID(ctx); got != "" {
		t.Errorf("BatchID of a plain context = %q; want \"\"", got)
	}
	ctx = coordinator.WithBatchID(ctx, "b-1")
	if got := coordinator.BatchID(ctx); got != "b-1" {
		t.Errorf("BatchID = %q; want b-1", got)
	}
	if got := coordinator.BatchID(coordinator.WithBatchID(ctx, "b-2")); got != "b-2" {
		t.Errorf("BatchID of a retried batch's context = %q; want the innermost ID b-2", got)
	}
}
