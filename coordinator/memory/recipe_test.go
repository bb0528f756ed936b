package memory_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/cbgrpc/cbgrpc/coordinator"
	"github.com/cbgrpc/cbgrpc/coordinator/coordinatortest"
	"github.com/cbgrpc/cbgrpc/coordinator/memory"
)

// recipe is the policy of the distributed breaker recipe (seed 000): at
// least 4 calls with 50 % failures trip, 500ms open, 2 probe slots leased
// for 5s, 2 successful probes close.
func recipe() coordinator.Policy {
	return coordinator.Policy{
		Window: 10 * time.Second, Buckets: 10, MinCalls: 4, FailureRatio: 0.5,
		OpenFor: 500 * time.Millisecond, Probes: 2, ProbeLease: 5 * time.Second, ProbeSuccesses: 2,
	}
}

type recipeBreaker struct {
	t     *testing.T
	clock *coordinatortest.Clock
	c     *memory.Coordinator
}

func newRecipe(t *testing.T) *recipeBreaker {
	c, clk := onFakeClock()
	return &recipeBreaker{t: t, clock: clk, c: c}
}

// record admits one call per outcome, as callers do to learn the
// generation to record under, and records them in one batch.
func (r *recipeBreaker) record(failures ...bool) coordinator.Result {
	r.t.Helper()
	var outcomes []coordinator.Outcome
	for i, f := range failures {
		d := r.admit(fmt.Sprint("call-", i))
		outcomes = append(outcomes, coordinator.Outcome{Generation: d.Generation, Failure: f})
	}
	res, err := r.c.Record(context.Background(), coordinator.RecordRequest{Scope: "recipe", Policy: recipe(), Outcomes: outcomes})
	if err != nil {
		r.t.Fatal(err)
	}
	return res
}

func (r *recipeBreaker) admit(claim string) coordinator.Decision {
	r.t.Helper()
	d, err := r.c.Admit(context.Background(), coordinator.AdmitRequest{Scope: "recipe", Policy: recipe(), Claim: claim})
	if err != nil {
		r.t.Fatal(err)
	}
	return d
}

func (r *recipeBreaker) settle(claim string, d coordinator.Decision, failure bool) coordinator.Result {
	r.t.Helper()
	res, err := r.c.Settle(context.Background(), coordinator.SettleRequest{Scope: "recipe", Policy: recipe(), Claim: claim, Outcome: coordinator.Outcome{Generation: d.Generation, Failure: failure}})
	if err != nil {
		r.t.Fatal(err)
	}
	return res
}

// halfOpen trips the breaker and waits out the open period.
func (r *recipeBreaker) halfOpen() {
	r.t.Helper()
	if res := r.record(true, false, true, false); res.State != coordinator.StateOpen {
		r.t.Fatalf("2 failures of 4: %+v; want open", res)
	}
	r.clock.Advance(500 * time.Millisecond)
}

func TestRecipeTwoFailuresOfFourTrip(t *testing.T) {
	r := newRecipe(t)
	res := r.record(false, true, false, true)
	if res.State != coordinator.StateOpen || res.Transition == nil || res.Transition.Reason != "failures 2/4 >= 50%" {
		t.Errorf("2 failures of 4: %+v; want open because failures 2/4 >= 50%%", res)
	}
}

func TestRecipeOneFailureOfFourDoesNotTrip(t *testing.T) {
	r := newRecipe(t)
	if res := r.record(false, true, false, false); res.State != coordinator.StateClosed || res.Transition != nil {
		t.Errorf("1 failure of 4: %+v; want closed", res)
	}
}

func TestRecipeOpenForHalfASecond(t *testing.T) {
	r := newRecipe(t)
	r.record(true, true, true, true)
	r.clock.Advance(499 * time.Millisecond)
	if d := r.admit("early"); d.Verdict != coordinator.Reject {
		t.Errorf("after 499ms: %+v; want Reject", d)
	}
	r.clock.Advance(time.Millisecond)
	if d := r.admit("on time"); d.Verdict != coordinator.Probe {
		t.Errorf("after 500ms: %+v; want a probe", d)
	}
}

func TestRecipeThirdConcurrentProbeIsRejected(t *testing.T) {
	r := newRecipe(t)
	r.halfOpen()
	for _, claim := range []string{"p1", "p2"} {
		if d := r.admit(claim); d.Verdict != coordinator.Probe {
			t.Fatalf("probe %s: %+v; want a probe slot", claim, d)
		}
	}
	if d := r.admit("p3"); d.Verdict != coordinator.Reject || d.RetryAfter != 5*time.Second {
		t.Errorf("third concurrent probe: %+v; want Reject until a lease ends in 5s", d)
	}
}

func TestRecipeDeadProbersSlotComesBackAfterItsLease(t *testing.T) {
	r := newRecipe(t)
	r.halfOpen()
	r.admit("dead")
	r.clock.Advance(time.Second)
	live := r.admit("live")
	if d := r.admit("waiting"); d.Verdict != coordinator.Reject {
		t.Fatalf("with both slots held: %+v; want Reject", d)
	}
	r.clock.Advance(4 * time.Second) // the dead prober's lease ends
	if d := r.admit("waiting"); d.Verdict != coordinator.Probe {
		t.Errorf("after the dead prober's lease: %+v; want its slot", d)
	}
	if res := r.settle("live", live, false); res.Stale != 0 {
		t.Errorf("the live prober's settlement: %+v; want it counted", res)
	}
}

func TestRecipeTwoSuccessesClose(t *testing.T) {
	r := newRecipe(t)
	r.halfOpen()
	p1, p2 := r.admit("p1"), r.admit("p2")
	if res := r.settle("p1", p1, false); res.State != coordinator.StateHalfOpen {
		t.Errorf("first success: %+v; want still half-open", res)
	}
	res := r.settle("p2", p2, false)
	if res.State != coordinator.StateClosed || res.Transition == nil || res.Transition.Reason != "probes succeeded 2/2" {
		t.Errorf("second success: %+v; want closed", res)
	}
}
