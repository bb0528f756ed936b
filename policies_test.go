package cbgrpc

import (
	"time"

	"github.com/cbgrpc/cbgrpc/coordinator"
)

// The policies the root tests run under, one place for all of them.

// tripPolicy trips on the first failure, so that tests need one call.
func tripPolicy() coordinator.Policy {
	p := coordinator.DefaultPolicy()
	p.FailureRatio = 0
	p.MinCalls = 0
	p.ConsecutiveFailures = 1
	p.Probes = 1
	p.ProbeSuccesses = 1
	p.MaxOpenFor = 0
	// One failure from anyone opens it, as a stand-in for a fleet's trip.
	p.Outliers = 0
	return p
}

// outlierPolicy: a run of three failures trips, judged without the one
// replica that contributes most; an outlier's period is 50ms.
func outlierPolicy() coordinator.Policy {
	p := coordinator.DefaultPolicy()
	p.MinCalls, p.ConsecutiveFailures, p.OpenFor, p.MaxOpenFor = 100, 3, 50*time.Millisecond, 0
	return p
}

// rampPolicy trips on one failure, recovers on one probe, and ramps for
// 10 s after.
func rampPolicy() coordinator.Policy {
	p := tripPolicy()
	p.RampFor = 10 * time.Second
	p.Window = time.Minute
	return p
}

// quietPolicy never trips in these tests, so every outcome counts.
func quietPolicy() coordinator.Policy {
	p := coordinator.DefaultPolicy()
	p.MinCalls = 1_000_000
	p.ConsecutiveFailures = 0
	return p
}

// ratioPolicy trips when at least half of at least four calls failed, so
// that one batch can hold calls before and after the one that tipped the
// window.
func ratioPolicy() coordinator.Policy {
	p := tripPolicy()
	p.ConsecutiveFailures = 0
	p.MinCalls = 4
	p.FailureRatio = 0.5
	return p
}

// throttlePolicy: a window of 20 rounds (buckets of 100ms), K 2, and a
// failure ratio above the 50% that K 2 holds the dependency at.
func throttlePolicy() coordinator.Policy {
	p := coordinator.DefaultPolicy()
	p.Window, p.Buckets = 2*time.Second, 20
	p.FailureRatio = 0.8
	// Under overload failures come in runs: the ratio is the rule here.
	p.ConsecutiveFailures = 0
	p.Throttle = 2
	return p
}
