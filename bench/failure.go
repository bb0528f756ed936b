package bench

import (
	"fmt"
	"math/rand/v2"
	"time"
)

// Failure is how the simulated dependency fails over a run. Times count
// from the start of the measurement (after the warm-up).
type Failure struct {
	// From is when failures start.
	From time.Duration
	// Ramp, when positive, makes the share of failing calls grow linearly
	// from 0 at From to Share at From + Ramp.
	Ramp time.Duration
	// Share is the share of calls that fail once failures have started
	// (and ramped up): 1 fails every call, 0 none.
	Share float64
}

// NoFailure is a healthy dependency.
var NoFailure = Failure{}

// FailFrom fails every call from t on.
func FailFrom(t time.Duration) Failure { return Failure{From: t, Share: 1} }

// FailRamp fails a share of calls that grows from 0 at t to 100 % at t+d.
func FailRamp(t, d time.Duration) Failure { return Failure{From: t, Ramp: d, Share: 1} }

// FailShare fails a share of calls from t on, at random: a dependency
// that fails too rarely to trip the breaker still sends its failures to
// Redis.
func FailShare(t time.Duration, share float64) Failure { return Failure{From: t, Share: share} }

// fails says whether a call made at since (from the start of the
// measurement) fails.
func (f Failure) fails(since time.Duration) bool {
	switch {
	case f.Share <= 0 || since < f.From:
		return false
	case f.Ramp <= 0 || since >= f.From+f.Ramp:
		return f.Share >= 1 || rand.Float64() < f.Share
	}
	return rand.Float64() < f.Share*float64(since-f.From)/float64(f.Ramp)
}

func (f Failure) String() string {
	switch {
	case f.Share <= 0:
		return "none"
	case f.Ramp <= 0 && f.Share >= 1:
		return fmt.Sprintf("all from %v", f.From)
	case f.Ramp <= 0:
		return fmt.Sprintf("%g%% from %v", 100*f.Share, f.From)
	}
	return fmt.Sprintf("ramp 0-%g%% over %v from %v", 100*f.Share, f.Ramp, f.From)
}
