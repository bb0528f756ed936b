package bench

import (
	"context"
	"math/rand/v2"
	"time"

	"google.golang.org/grpc"
)

// tripDependency is the stub dependency of a trip run: what it does with
// a call, as a function of when the call is made and which replica makes
// it. Every breaker of a replica meets the same process, each call drawn
// on its own.
type tripDependency struct {
	noise             float64
	share             float64 // of the calls failing once down and ramped up
	rampUp            time.Duration
	slowShare         float64
	slowBy            time.Duration
	downFor           time.Duration
	downReplicas, bad int
}

func newTripDependency(cfg TripConfig) tripDependency {
	d := tripDependency{noise: cfg.Noise, share: cfg.Share, rampUp: cfg.RampUp, slowShare: cfg.SlowShare, slowBy: cfg.SlowBy,
		downFor: cfg.Down, downReplicas: cfg.DownReplicas, bad: cfg.Bad}
	if d.share == 0 {
		d.share = 1
	}
	if d.downReplicas == 0 {
		d.downReplicas = cfg.Replicas - cfg.Bad
	}
	return d
}

// answer is what the dependency does with one call.
type answer struct {
	fail bool
	slow time.Duration
}

// answer draws the answer to a call of replica i made at since, counted
// from when the dependency went down (negative: before).
func (d tripDependency) answer(i int, since time.Duration) answer {
	switch {
	case i < d.bad:
		return answer{fail: true}
	case since < 0 || d.downFor == 0 || d.spared(i):
		return answer{fail: rand.Float64() < d.noise}
	case d.slowShare > 0:
		a := answer{fail: rand.Float64() < d.noise}
		if rand.Float64() < d.slowShare {
			a.slow = d.slowBy
		}
		return a
	}
	share := d.share
	if since < d.rampUp {
		share *= float64(since) / float64(d.rampUp)
	}
	// The noise goes on under a brownout that fails fewer calls than it.
	return answer{fail: rand.Float64() < max(share, d.noise)}
}

// spared says whether replica i is outside the zone that meets the outage.
func (d tripDependency) spared(i int) bool { return i >= d.bad && i-d.bad >= d.downReplicas }

// invoker answers the call as a, taking a.slow unless ctx ends first.
func (a answer) invoker() grpc.UnaryInvoker {
	return func(ctx context.Context, _ string, _, _ any, _ *grpc.ClientConn, _ ...grpc.CallOption) error {
		if a.slow > 0 {
			t := time.NewTimer(a.slow)
			defer t.Stop()
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-t.C:
			}
		}
		if a.fail {
			return errDependency
		}
		return nil
	}
}
