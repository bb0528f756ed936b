package memory_test

import (
	"context"
	"testing"
	"time"

	"github.com/cbgrpc/cbgrpc/coordinator"
	"github.com/cbgrpc/cbgrpc/coordinator/coordinatortest"
)

// TestKata replays the worked example of the single-process breaker kata
// (seed 004): two failures in a row open the breaker for 10 time units
// (seconds here), one trial call in half-open, and the trial's result goes
// to Settle.
func TestKata(t *testing.T) {
	p := coordinator.Policy{
		Window: time.Minute, Buckets: 6, ConsecutiveFailures: 2,
		OpenFor: 10 * time.Second, Probes: 1, ProbeLease: time.Minute, ProbeSuccesses: 1,
	}
	c, clk := onFakeClock()
	t0 := coordinatortest.Start
	at := func(sec int) { clk.Set(t0.Add(time.Duration(sec) * time.Second)) }
	ctx := context.Background()
	const scope = "kata"

	allow := func(sec int, claim string) coordinator.Decision {
		t.Helper()
		at(sec)
		d, err := c.Admit(ctx, coordinator.AdmitRequest{Scope: scope, Policy: p, Claim: claim})
		if err != nil {
			t.Fatalf("allow(%d): %v", sec, err)
		}
		return d
	}
	state := func(sec int) coordinator.State {
		t.Helper()
		at(sec)
		s, err := c.Snapshot(ctx, scope, p)
		if err != nil {
			t.Fatalf("state(%d): %v", sec, err)
		}
		return s.State
	}
	// In closed, record is an ordinary call: admitted (which tells the
	// generation to record it under), then recorded.
	recordClosed := func(sec int, failure bool) coordinator.Result {
		t.Helper()
		d := allow(sec, "")
		res, err := c.Record(ctx, coordinator.RecordRequest{Scope: scope, Policy: p, Outcomes: []coordinator.Outcome{{Generation: d.Generation, Failure: failure}}})
		if err != nil {
			t.Fatalf("record(%v, %d): %v", !failure, sec, err)
		}
		return res
	}
	// In half-open, record is the trial's result.
	recordTrial := func(sec int, claim string, trial coordinator.Decision, failure bool) coordinator.Result {
		t.Helper()
		at(sec)
		res, err := c.Settle(ctx, coordinator.SettleRequest{Scope: scope, Policy: p, Claim: claim, Outcome: coordinator.Outcome{Generation: trial.Generation, Failure: failure}})
		if err != nil {
			t.Fatalf("record(%v, %d): %v", !failure, sec, err)
		}
		return res
	}

	// cb.record(False, 1); cb.record(False, 2): 2 consecutive failures, opens at 2
	if res := recordClosed(1, true); res.State != coordinator.StateClosed {
		t.Errorf("record(False, 1): %v; want closed", res.State)
	}
	res := recordClosed(2, true)
	if tr := res.Transition; res.State != coordinator.StateOpen || tr == nil || !tr.At.Equal(t0.Add(2*time.Second)) || res.RetryAfter != 10*time.Second {
		t.Errorf("record(False, 2): %+v; want open at 2 for 10 units", res)
	}
	// cb.allow(5) -> False
	if d := allow(5, "x"); d.Verdict != coordinator.Reject || d.RetryAfter != 7*time.Second {
		t.Errorf("allow(5) = %+v; want Reject for 7 more units", d)
	}
	// cb.state(11) -> "open"
	if s := state(11); s != coordinator.StateOpen {
		t.Errorf("state(11) = %v; want open", s)
	}
	// cb.state(12) -> "half_open"
	if s := state(12); s != coordinator.StateHalfOpen {
		t.Errorf("state(12) = %v; want half-open", s)
	}
	// cb.allow(12) -> True (the trial)
	trial := allow(12, "trial-1")
	if trial.Verdict != coordinator.Probe {
		t.Errorf("allow(12) = %+v; want the trial", trial)
	}
	// cb.allow(13) -> False (trial still in flight)
	if d := allow(13, "y"); d.Verdict != coordinator.Reject {
		t.Errorf("allow(13) = %+v; want Reject while the trial is in flight", d)
	}
	// cb.record(False, 14): trial failed, open again from 14
	res = recordTrial(14, "trial-1", trial, true)
	if tr := res.Transition; res.State != coordinator.StateOpen || tr == nil || !tr.At.Equal(t0.Add(14*time.Second)) || res.RetryAfter != 10*time.Second {
		t.Errorf("record(False, 14): %+v; want open again from 14 for 10 units", res)
	}
	// cb.allow(23) -> False
	if d := allow(23, "z"); d.Verdict != coordinator.Reject {
		t.Errorf("allow(23) = %+v; want Reject", d)
	}
	// cb.allow(24) -> True
	trial = allow(24, "trial-2")
	if trial.Verdict != coordinator.Probe {
		t.Errorf("allow(24) = %+v; want the trial", trial)
	}
	// cb.record(True, 25): closed
	if res := recordTrial(25, "trial-2", trial, false); res.State != coordinator.StateClosed {
		t.Errorf("record(True, 25): %+v; want closed", res)
	}
	// cb.state(25) -> "closed"
	if s := state(25); s != coordinator.StateClosed {
		t.Errorf("state(25) = %v; want closed", s)
	}
}
