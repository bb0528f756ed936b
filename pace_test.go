package cbgrpc

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/cbgrpc/cbgrpc/coordinator"
	"github.com/cbgrpc/cbgrpc/coordinator/coordinatortest"
)

func TestCalmInterval(t *testing.T) {
	p := coordinator.DefaultPolicy() // a 30s window
	for _, c := range []struct {
		interval, window, want time.Duration
	}{
		{time.Second, 30 * time.Second, 5 * time.Second}, // five record intervals
		{time.Second, 12 * time.Second, 2 * time.Second}, // a sixth of the window
		{time.Second, 3 * time.Second, time.Second},      // never less than the record interval
		{10 * time.Millisecond, 30 * time.Second, 50 * time.Millisecond},
	} {
		p.Window = c.window
		if got := calmInterval(c.interval, p); got != c.want {
			t.Errorf("calmInterval(%v, window %v) = %v, want %v", c.interval, c.window, got, c.want)
		}
	}
}

func TestCalm(t *testing.T) {
	p := coordinator.DefaultPolicy() // failures at 50%
	p.SlowCallDuration, p.SlowCallRatio = time.Second, 0.8
	closed := func(calls, failures, slow int) answer {
		return answer{state: coordinator.StateClosed, gen: 1, window: window{calls: calls, failures: failures, slow: slow}}
	}
	withConsecutive := p
	withConsecutive.ConsecutiveFailures = 5
	plainConsecutive := withConsecutive
	plainConsecutive.Outliers = 0
	noSlowRule := p
	noSlowRule.SlowCallDuration = 0
	throttling := p
	throttling.Throttle, throttling.FailureRatio = 2, 0.8
	throttledAnswer := closed(100, 20, 0)
	throttledAnswer.window.throttled = 150
	for _, c := range []struct {
		what string
		p    coordinator.Policy
		a    answer
		want bool
	}{
		{"healthy", p, closed(100, 24, 0), true},
		{"failures at half the threshold", p, closed(100, 25, 0), false},
		{"slow calls at half the threshold", p, closed(100, 0, 40), false},
		{"slow calls, with the slow rule off", noSlowRule, closed(100, 0, 90), true},
		{"nothing counted (a stale Record)", p, closed(0, 0, 0), false},
		{"open", p, answer{state: coordinator.StateOpen, gen: 2}, false},
		{"disabled", p, answer{state: coordinator.StateDisabled, gen: 2, window: window{calls: 100}}, false},
		{"ramping", p, answer{state: coordinator.StateClosed, gen: 2, rampLeft: time.Second, window: window{calls: 100}}, false},
		{"the consecutive-failures rule, judged without outliers", withConsecutive, closed(100, 0, 0), true},
		{"the consecutive-failures rule, on every replica alike", plainConsecutive, closed(100, 0, 0), false},
		{"throttling on, nothing rejected", throttling, closed(100, 20, 0), true},
		{"throttling calls", throttling, throttledAnswer, false},
	} {
		if got := calm(c.p, c.a); got != c.want {
			t.Errorf("%s: calm = %v, want %v", c.what, got, c.want)
		}
	}
}

// TestCalmScopeReportsLessOften: successes of a scope whose window is
// calm wait the calm interval (five record intervals here), not the
// record interval; once failures bring its ratio past half the threshold,
// successes alone go every record interval again.
func TestCalmScopeReportsLessOften(t *testing.T) {
	_, tc := memoryWith(t, coordinatortest.NewClock()) // the window never slides
	p := quietPolicy()
	p.Window = 6 * time.Second
	const interval = 40 * time.Millisecond
	calmEvery := calmInterval(interval, p) // 200ms
	b := newBreaker(t, tc, WithPolicy(p), WithRecordInterval(interval))
	ctx := context.Background()
	calls := func(n int, err error) {
		for range n {
			tk, aerr := admitCall(b, ctx, &call{scope: "paced", method: testMethod})
			if aerr != nil {
				t.Fatal(aerr)
			}
			b.finish(ctx, tk, err)
		}
	}
	// successesFor calls with success every 2ms for d and returns how many
	// Records went meanwhile.
	successesFor := func(d time.Duration) int64 {
		before := tc.records.Load()
		for end := time.Now().Add(d); time.Now().Before(end); {
			calls(1, nil)
			time.Sleep(2 * time.Millisecond)
		}
		return tc.records.Load() - before
	}

	calls(10, nil)
	eventually(t, "the first Record, which finds the window calm", func() bool { return tc.recorded.Load() == 10 })
	const d = time.Second
	calmRecords := successesFor(d)
	if most := int64(d/calmEvery) + 2; calmRecords > most || calmRecords == 0 {
		t.Errorf("%d Records in %v of successes of a calm scope; want 1..%d, one a calm interval (%v)", calmRecords, d, most, calmEvery)
	}

	// Failures, far more than the successes so far: the window reads
	// well past half of FailureRatio, and stays so below.
	calls(2000, status.Error(codes.Unavailable, "down"))
	eventually(t, "the failures recorded", func() bool { return tc.recorded.Load() >= 2010 })
	restless := successesFor(d)
	t.Logf("in %v of successes: %d Records while calm (every %v at most), %d after the failures (every %v)", d, calmRecords, calmEvery, restless, interval)
	if restless < 2*calmRecords+2 {
		t.Errorf("%d Records in %v of successes after the failures, against %d while calm; want them sent every record interval (%v), not every calm interval",
			restless, d, calmRecords, interval)
	}
}
