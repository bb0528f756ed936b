package bench

import (
	"context"
	"math"
	"math/rand/v2"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/status"
)

// tripDependency is the stub dependency of a trip run: what it does with
// a call, as a function of when the call is made and which replica makes
// it. Every breaker of a replica meets the same process, each call drawn
// on its own.
type tripDependency struct {
	noise                     float64
	share                     float64 // of the calls failing once down and ramped up
	rampUp                    time.Duration
	slowShare                 float64
	slowBy                    time.Duration
	downFor, recover, relapse time.Duration
	downReplicas, bad         int
	stall                     bool
	latency                   time.Duration // the median
	sigma                     float64
}

func newTripDependency(cfg TripConfig) tripDependency {
	d := tripDependency{noise: cfg.Noise, share: cfg.Share, rampUp: cfg.RampUp, slowShare: cfg.SlowShare, slowBy: cfg.SlowBy,
		downFor: cfg.Down, recover: cfg.Recover, relapse: cfg.Relapse, downReplicas: cfg.DownReplicas, bad: cfg.Bad,
		stall: cfg.Stall, latency: cfg.Latency, sigma: cfg.LatencySigma}
	if d.share == 0 {
		d.share = 1
	}
	if d.downReplicas == 0 {
		d.downReplicas = cfg.Replicas - cfg.Bad
	}
	return d
}

// tripPhase is the part of a run a call falls in.
type tripPhase int

const (
	phaseHealthy   tripPhase = iota // the spell, or a run that never goes down
	phaseDown                       // the outage
	phaseRecovered                  // after the outage, with Recover
	phaseRelapsed                   // after the recovery, with Relapse
)

// phase says which part of the run a call made at since, counted from
// when the dependency went down, falls in, and how long into that part.
// A call made after the run's end counts in its last part.
func (d tripDependency) phase(since time.Duration) (tripPhase, time.Duration) {
	switch {
	case since < 0 || d.downFor == 0:
		return phaseHealthy, since
	case since < d.downFor || d.recover == 0:
		return phaseDown, since
	case since < d.downFor+d.recover || d.relapse == 0:
		return phaseRecovered, since - d.downFor
	}
	return phaseRelapsed, since - d.downFor - d.recover
}

// answer is what the dependency does with one call: it takes latency,
// and slow more in a latency brownout, then fails or succeeds; or it hangs,
// answering nothing until the call's context ends.
type answer struct {
	fail    bool
	slow    time.Duration
	hang    bool
	latency time.Duration
}

// answer draws the answer to a call of replica i made at since, counted
// from when the dependency went down (negative: before).
func (d tripDependency) answer(i int, since time.Duration) answer {
	a := d.outcome(i, since)
	if !a.hang && d.latency > 0 {
		// Log-normal: the median times e to a normal draw of sigma.
		a.latency = time.Duration(float64(d.latency) * math.Exp(d.sigma*rand.NormFloat64()))
	}
	return a
}

// outcome draws what the dependency does with a call of replica i made at
// since, but for its latency. A relapse is the outage again, ramp
// included; in a stall the calls it fails hang instead.
func (d tripDependency) outcome(i int, since time.Duration) answer {
	phase, into := d.phase(since)
	switch {
	case i < d.bad:
		return answer{fail: !d.stall, hang: d.stall}
	case phase == phaseHealthy || phase == phaseRecovered || d.spared(i):
		return answer{fail: rand.Float64() < d.noise}
	case d.slowShare > 0:
		a := answer{fail: rand.Float64() < d.noise}
		if rand.Float64() < d.slowShare {
			a.slow = d.slowBy
		}
		return a
	}
	share := d.share
	if into < d.rampUp {
		share *= float64(into) / float64(d.rampUp)
	}
	if d.stall {
		// The noise fails at once, as before the stall.
		if rand.Float64() < share {
			return answer{hang: true}
		}
		return answer{fail: rand.Float64() < d.noise}
	}
	// The noise goes on under a brownout that fails fewer calls than it.
	return answer{fail: rand.Float64() < max(share, d.noise)}
}

// spared says whether replica i is outside the zone that meets the outage.
func (d tripDependency) spared(i int) bool { return i >= d.bad && i-d.bad >= d.downReplicas }

// invoker answers the call as a, calling let first: let through, the
// call has reached the dependency.
func (a answer) invoker(let func()) grpc.UnaryInvoker {
	return func(ctx context.Context, _ string, _, _ any, _ *grpc.ClientConn, _ ...grpc.CallOption) error {
		let()
		if err := a.wait(ctx); err != nil {
			return err
		}
		if a.fail {
			return errDependency
		}
		return nil
	}
}

// wait takes the answer's time, forever if it hangs, unless ctx ends
// first; then it returns the error gRPC returns.
func (a answer) wait(ctx context.Context) error {
	took := a.latency + a.slow
	if !a.hang && took == 0 {
		return nil
	}
	var done <-chan time.Time // nil: forever
	if !a.hang {
		t := time.NewTimer(took)
		defer t.Stop()
		done = t.C
	}
	select {
	case <-ctx.Done():
		return status.FromContextError(ctx.Err()).Err()
	case <-done:
		return nil
	}
}
