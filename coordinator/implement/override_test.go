package implement

import (
	"errors"
	"strings"
	"testing"

	"github.com/cbgrpc/cbgrpc/coordinator"
)

// An override that turns the throttle on over a FailureRatio at or below
// the share of failures it holds is refused, naming FailureRatio, whether
// it is applied, checked before it is stored, or laid over a fleet default.
func TestOverrideThrottleNeedsFailureRatioAboveItsShare(t *testing.T) {
	var pe *coordinator.PolicyError
	if _, err := (coordinator.Override{"Throttle": "2"}).Apply(coordinator.DefaultPolicy()); !errors.As(err, &pe) || pe.Field != "FailureRatio" || !strings.Contains(err.Error(), "1 − 1/K") {
		t.Errorf("Throttle=2 over FailureRatio 0.5: %v; want an error naming FailureRatio and 1 − 1/K", err)
	}
	if err := CheckOverride(coordinator.ScopeTarget("svc"), coordinator.Override{"Throttle": "2"}, nil); !errors.As(err, &pe) || pe.Field != "FailureRatio" {
		t.Errorf("CheckOverride(Throttle=2): %v; want an error naming FailureRatio", err)
	}
	fleet := coordinator.Override{"Throttle": "2", "FailureRatio": "0.8"}
	if err := CheckOverride(coordinator.FleetDefault, fleet, nil); err != nil {
		t.Errorf("CheckOverride(%v) = %v; want it accepted", fleet, err)
	}
	if err := CheckOverride(coordinator.ScopeTarget("svc"), coordinator.Override{"FailureRatio": "0.5"}, fleet); !errors.As(err, &pe) || pe.Field != "FailureRatio" {
		t.Errorf("FailureRatio=0.5 over a fleet default with Throttle=2: %v; want an error naming FailureRatio", err)
	}
}
