package coordinator_test

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/cbgrpc/cbgrpc/coordinator"
	"github.com/cbgrpc/cbgrpc/coordinator/coordinatortest"
	"github.com/cbgrpc/cbgrpc/coordinator/memory"
)

func TestDefaultPolicyIsValid(t *testing.T) {
	if err := coordinator.DefaultPolicy().Validate(); err != nil {
		t.Fatalf("DefaultPolicy().Validate() = %v", err)
	}
}

// small is a valid policy that each case below breaks in one field.
func small() coordinator.Policy {
	return coordinator.Policy{
		Window: time.Second, Buckets: 10, MinCalls: 4, FailureRatio: 0.5,
		OpenFor: 100 * time.Millisecond, Probes: 2, ProbeLease: 300 * time.Millisecond, ProbeSuccesses: 2,
	}
}

func TestPolicyValidateRejects(t *testing.T) {
	for _, tc := range []struct {
		name  string
		edit  func(*coordinator.Policy)
		field string
	}{
		{"zero window", func(p *coordinator.Policy) { p.Window = 0 }, "Window"},
		{"negative window", func(p *coordinator.Policy) { p.Window = -time.Second }, "Window"},
		{"zero buckets", func(p *coordinator.Policy) { p.Buckets = 0 }, "Buckets"},
		{"negative buckets", func(p *coordinator.Policy) { p.Buckets = -1 }, "Buckets"},
		{"bucket under 1ms", func(p *coordinator.Policy) { p.Window, p.Buckets = 5*time.Millisecond, 10 }, "Buckets"},
		{"negative failure ratio", func(p *coordinator.Policy) { p.FailureRatio = -0.1 }, "FailureRatio"},
		{"NaN failure ratio", func(p *coordinator.Policy) { p.FailureRatio = math.NaN() }, "FailureRatio"},
		{"failure ratio 1", func(p *coordinator.Policy) { p.FailureRatio = 1 }, "FailureRatio"},
		{"failure ratio above 1", func(p *coordinator.Policy) { p.FailureRatio = 1.5 }, "FailureRatio"},
		{"failure ratio rounds to 0", func(p *coordinator.Policy) { p.FailureRatio = 0.0004 }, "FailureRatio"},
		{"failure ratio rounds to 1000", func(p *coordinator.Policy) { p.FailureRatio = 0.9996 }, "FailureRatio"},
		{"negative slow ratio", func(p *coordinator.Policy) { p.SlowCallDuration, p.SlowCallRatio = time.Second, -0.5 }, "SlowCallRatio"},
		{"slow ratio 1", func(p *coordinator.Policy) { p.SlowCallDuration, p.SlowCallRatio = time.Second, 1 }, "SlowCallRatio"},
		{"slow ratio rounds to 0", func(p *coordinator.Policy) { p.SlowCallDuration, p.SlowCallRatio = time.Second, 0.0001 }, "SlowCallRatio"},
		{"slow ratio rounds to 1000", func(p *coordinator.Policy) { p.SlowCallDuration, p.SlowCallRatio = time.Second, 0.99951 }, "SlowCallRatio"},
		{"slow duration without ratio", func(p *coordinator.Policy) { p.SlowCallDuration = time.Second }, "SlowCallRatio"},
		{"slow ratio without duration", func(p *coordinator.Policy) { p.SlowCallRatio = 0.5 }, "SlowCallDuration"},
		{"negative slow duration", func(p *coordinator.Policy) { p.SlowCallDuration, p.SlowCallRatio = -time.Second, 0.5 }, "SlowCallDuration"},
		{"slow duration under 1ms", func(p *coordinator.Policy) { p.SlowCallDuration, p.SlowCallRatio = time.Microsecond, 0.5 }, "SlowCallDuration"},
		{"negative consecutive failures", func(p *coordinator.Policy) { p.ConsecutiveFailures = -1 }, "ConsecutiveFailures"},
		{"no trip rule", func(p *coordinator.Policy) { p.FailureRatio = 0 }, "FailureRatio"},
		{"MinCalls 0 with the failure ratio", func(p *coordinator.Policy) { p.MinCalls = 0 }, "MinCalls"},
		{"MinCalls 0 with the slow-call ratio", func(p *coordinator.Policy) {
			p.FailureRatio, p.MinCalls, p.SlowCallDuration, p.SlowCallRatio = 0, 0, time.Second, 0.5
		}, "MinCalls"},
		{"negative MinCalls with the failure ratio", func(p *coordinator.Policy) { p.MinCalls = -1 }, "MinCalls"},
		{"negative MinCalls without a ratio", func(p *coordinator.Policy) {
			p.FailureRatio, p.ConsecutiveFailures, p.MinCalls = 0, 3, -1
		}, "MinCalls"},
		{"zero probes", func(p *coordinator.Policy) { p.Probes = 0 }, "Probes"},
		{"negative probes", func(p *coordinator.Policy) { p.Probes = -2 }, "Probes"},
		{"zero probe successes", func(p *coordinator.Policy) { p.ProbeSuccesses = 0 }, "ProbeSuccesses"},
		{"negative ramp", func(p *coordinator.Policy) { p.RampFor = -time.Second }, "RampFor"},
		{"ramp under a millisecond", func(p *coordinator.Policy) { p.RampFor = time.Microsecond }, "RampFor"},
		{"negative throttle", func(p *coordinator.Policy) { p.Throttle = -2 }, "Throttle"},
		{"throttle K under 1", func(p *coordinator.Policy) { p.Throttle = 0.5 }, "Throttle"},
		{"NaN throttle", func(p *coordinator.Policy) { p.Throttle = math.NaN() }, "Throttle"},
		{"infinite throttle", func(p *coordinator.Policy) { p.Throttle = math.Inf(1) }, "Throttle"},
		{"failure ratio at the share K 2 holds", func(p *coordinator.Policy) { p.Throttle, p.FailureRatio = 2, 0.5 }, "FailureRatio"},
		{"failure ratio below the share K 2 holds", func(p *coordinator.Policy) { p.Throttle, p.FailureRatio = 2, 0.3 }, "FailureRatio"},
		{"failure ratio that rounds to the share K 2 holds", func(p *coordinator.Policy) { p.Throttle, p.FailureRatio = 2, 0.5004 }, "FailureRatio"},
		{"failure ratio below the share K 4 holds", func(p *coordinator.Policy) { p.Throttle, p.FailureRatio = 4, 0.75 }, "FailureRatio"},
		{"no failure ratio above the share K 2000 holds", func(p *coordinator.Policy) { p.Throttle, p.FailureRatio = 2000, 0.999 }, "FailureRatio"},
		{"negative outliers", func(p *coordinator.Policy) { p.Outliers = -1 }, "Outliers"},
		{"more outliers than a coordinator tracks", func(p *coordinator.Policy) { p.Outliers = coordinator.MaxOutliers + 1 }, "Outliers"},
		{"zero probe lease", func(p *coordinator.Policy) { p.ProbeLease = 0 }, "ProbeLease"},
		{"negative probe lease", func(p *coordinator.Policy) { p.ProbeLease = -time.Second }, "ProbeLease"},
		{"probe lease under 1ms", func(p *coordinator.Policy) { p.ProbeLease = time.Microsecond }, "ProbeLease"},
		{"zero open period", func(p *coordinator.Policy) { p.OpenFor = 0 }, "OpenFor"},
		{"negative open period", func(p *coordinator.Policy) { p.OpenFor = -time.Second }, "OpenFor"},
		{"open period under 1ms", func(p *coordinator.Policy) { p.OpenFor = time.Microsecond }, "OpenFor"},
		{"negative MaxOpenFor", func(p *coordinator.Policy) { p.MaxOpenFor = -time.Second }, "MaxOpenFor"},
		{"MaxOpenFor below OpenFor", func(p *coordinator.Policy) { p.MaxOpenFor = 50 * time.Millisecond }, "MaxOpenFor"},
		{"MaxOpenFor equal to OpenFor", func(p *coordinator.Policy) { p.MaxOpenFor = 100 * time.Millisecond }, "MaxOpenFor"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := small()
			tc.edit(&p)
			err := p.Validate()
			if !errors.Is(err, coordinator.ErrInvalidPolicy) {
				t.Fatalf("Validate(%+v) = %v; want an error wrapping ErrInvalidPolicy", p, err)
			}
			var pe *coordinator.PolicyError
			if !errors.As(err, &pe) || pe.Field != tc.field {
				t.Errorf("Validate() = %v; want a *PolicyError for field %s", err, tc.field)
			}
			if !strings.Contains(err.Error(), tc.field) {
				t.Errorf("message %q does not name the field %s", err, tc.field)
			}
		})
	}
}

func TestPolicyValidateAccepts(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(*coordinator.Policy)
	}{
		{"small", func(*coordinator.Policy) {}},
		{"more probe successes than probes, since a settled slot is reused", func(p *coordinator.Policy) { p.Probes, p.ProbeSuccesses = 1, 5 }},
		{"a ramp after recoveries", func(p *coordinator.Policy) { p.RampFor = 30 * time.Second }},
		{"adaptive throttling, K 2", func(p *coordinator.Policy) { p.Throttle, p.FailureRatio = 2, 0.8 }},
		{"adaptive throttling, K 2, a thousandth above the share it holds", func(p *coordinator.Policy) { p.Throttle, p.FailureRatio = 2, 0.501 }},
		{"adaptive throttling, K 3, above the share it holds", func(p *coordinator.Policy) { p.Throttle, p.FailureRatio = 3, 0.667 }},
		{"adaptive throttling, K 1", func(p *coordinator.Policy) { p.Throttle = 1 }},
		{"adaptive throttling without the failure ratio", func(p *coordinator.Policy) { p.Throttle, p.FailureRatio, p.ConsecutiveFailures = 2, 0, 5 }},
		{"consecutive failures only, MinCalls 0", func(p *coordinator.Policy) { p.FailureRatio, p.MinCalls, p.ConsecutiveFailures = 0, 0, 5 }},
		{"slow-call rule only", func(p *coordinator.Policy) { p.FailureRatio, p.SlowCallDuration, p.SlowCallRatio = 0, time.Second, 0.8 }},
		{"smallest ratio", func(p *coordinator.Policy) { p.FailureRatio = 0.001 }},
		{"largest ratio", func(p *coordinator.Policy) { p.FailureRatio = 0.999 }},
		{"ratio that rounds to 1 thousandth", func(p *coordinator.Policy) { p.FailureRatio = 0.0006 }},
		{"1ms buckets", func(p *coordinator.Policy) { p.Window, p.Buckets = 10*time.Millisecond, 10 }},
		{"MaxOpenFor just above OpenFor", func(p *coordinator.Policy) { p.MaxOpenFor = 101 * time.Millisecond }},
		{"the plain rules, no replica left out", func(p *coordinator.Policy) { p.Outliers = 0 }},
		{"the most outliers left out", func(p *coordinator.Policy) { p.Outliers = coordinator.MaxOutliers }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := small()
			tc.edit(&p)
			if err := p.Validate(); err != nil {
				t.Errorf("Validate(%+v) = %v; want nil", p, err)
			}
		})
	}
}

func TestBucketWidthRoundsDownToMillisecond(t *testing.T) {
	p := small()
	p.Window, p.Buckets = 1000*time.Millisecond, 3
	if got := p.BucketWidth(); got != 333*time.Millisecond {
		t.Errorf("BucketWidth() = %v; want 333ms", got)
	}
	p.Buckets = 0
	if got := p.BucketWidth(); got != 0 {
		t.Errorf("BucketWidth() with 0 buckets = %v; want 0", got)
	}
}

func TestIsSlow(t *testing.T) {
	p := small()
	if p.IsSlow(time.Hour) {
		t.Error("IsSlow with the slow-call rule off = true")
	}
	p.SlowCallDuration, p.SlowCallRatio = 100*time.Millisecond, 0.5
	for d, want := range map[time.Duration]bool{99 * time.Millisecond: false, 100 * time.Millisecond: true, time.Second: true} {
		if got := p.IsSlow(d); got != want {
			t.Errorf("IsSlow(%v) = %v; want %v", d, got, want)
		}
	}
}

// FuzzPolicyValidate checks that Validate never panics and that every
// policy it accepts works: the memory coordinator can trip, probe and
// recover with it without an error.
func FuzzPolicyValidate(f *testing.F) {
	add := func(p coordinator.Policy) {
		f.Add(int64(p.Window), p.Buckets, p.MinCalls, p.FailureRatio, p.ConsecutiveFailures, int64(p.SlowCallDuration),
			p.SlowCallRatio, int64(p.OpenFor), int64(p.MaxOpenFor), p.Probes, int64(p.ProbeLease), p.ProbeSuccesses, p.Outliers)
	}
	add(coordinator.DefaultPolicy())
	add(small())
	add(coordinator.Policy{Window: math.MaxInt64, Buckets: 1, ConsecutiveFailures: 1, OpenFor: math.MaxInt64,
		MaxOpenFor: 0, Probes: math.MaxInt, ProbeLease: math.MaxInt64, ProbeSuccesses: math.MaxInt})
	add(coordinator.Policy{Window: time.Millisecond, Buckets: 1, MinCalls: 1, FailureRatio: 0.0005, SlowCallDuration: time.Millisecond,
		SlowCallRatio: 0.9995, OpenFor: time.Millisecond, MaxOpenFor: math.MaxInt64, Probes: 1, ProbeLease: time.Millisecond, ProbeSuccesses: 1})
	f.Fuzz(func(t *testing.T, window int64, buckets, minCalls int, failureRatio float64, consecutive int, slowDuration int64,
		slowRatio float64, openFor, maxOpenFor int64, probes int, lease int64, successes, outliers int) {
		p := coordinator.Policy{
			Window: time.Duration(window), Buckets: buckets, MinCalls: minCalls, FailureRatio: failureRatio,
			ConsecutiveFailures: consecutive, SlowCallDuration: time.Duration(slowDuration), SlowCallRatio: slowRatio,
			OpenFor: time.Duration(openFor), MaxOpenFor: time.Duration(maxOpenFor), Probes: probes,
			ProbeLease: time.Duration(lease), ProbeSuccesses: successes, Outliers: outliers,
		}
		err := p.Validate()
		if err != nil {
			if !errors.Is(err, coordinator.ErrInvalidPolicy) {
				t.Fatalf("Validate() = %v; want an error wrapping ErrInvalidPolicy", err)
			}
			return
		}
		exercise(t, p)
	})
}

// exercise drives a valid policy through a trip, a failed probe and as
// much of a recovery as a few calls allow, wanting no error.
func exercise(t *testing.T, p coordinator.Policy) {
	clk := coordinatortest.NewClock()
	c := memory.New(memory.WithClock(clk.Now))
	ctx := context.Background()
	check := func(op string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s with valid policy %+v: %v", op, p, err)
		}
	}
	d, err := c.Admit(ctx, coordinator.AdmitRequest{Scope: "s", Policy: p, Claim: "a"})
	check("Admit", err)
	for i := 0; i < 64; i++ {
		res, err := c.Record(ctx, coordinator.RecordRequest{Scope: "s", Policy: p, Outcomes: []coordinator.Outcome{{Generation: d.Generation, Failure: true, Duration: p.SlowCallDuration}}})
		check("Record", err)
		if res.State != coordinator.StateClosed {
			break
		}
	}
	for round := 0; round < 3; round++ {
		s, err := c.Snapshot(ctx, "s", p)
		check("Snapshot", err)
		if s.State == coordinator.StateClosed {
			return
		}
		clk.Set(s.OpenUntil)
		for i := 0; i < 4; i++ {
			claim := string(rune('a' + i))
			d, err := c.Admit(ctx, coordinator.AdmitRequest{Scope: "s", Policy: p, Claim: claim})
			check("Admit", err)
			if d.Verdict != coordinator.Probe {
				break
			}
			_, err = c.Settle(ctx, coordinator.SettleRequest{Scope: "s", Policy: p, Claim: claim, Outcome: coordinator.Outcome{Generation: d.Generation, Failure: round == 0}})
			check("Settle", err)
		}
	}
}
