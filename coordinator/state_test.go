package coordinator_test

import (
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
