package coordinatortest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/cbgrpc/cbgrpc/coordinator"
)

// harness drives one scope of one coordinator under a fake clock and fails
// the test on any error the coordinator returns.
type harness struct {
	t     *testing.T
	c     coordinator.Coordinator
	clock *fakeClock
	p     coordinator.Policy
	scope string
}

// basePolicy is small enough to reason about in a test: four calls at 50 %
// trip, 100ms open, two probes leased for 300ms, two successes close.
func basePolicy() coordinator.Policy {
	return coordinator.Policy{
		Window:         time.Second,
		Buckets:        10,
		MinCalls:       4,
		FailureRatio:   0.5,
		OpenFor:        100 * time.Millisecond,
		Probes:         2,
		ProbeLease:     300 * time.Millisecond,
		ProbeSuccesses: 2,
	}
}

func newHarness(t *testing.T, newCoordinator Factory, p coordinator.Policy) *harness {
	t.Helper()
	clock := newFakeClock()
	c := newCoordinator(t, clock.Now)
	if c == nil {
		t.Fatal("the factory returned a nil coordinator")
	}
	return &harness{t: t, c: c, clock: clock, p: p, scope: "conformance/" + t.Name()}
}

// on returns a harness for another scope of the same coordinator and clock.
func (h *harness) on(scope string) *harness {
	o := *h
	o.scope = scope
	return &o
}

// now is the coordinator's view of the clock: whole milliseconds.
func (h *harness) now() time.Time { return h.clock.Now().Truncate(time.Millisecond) }

func (h *harness) advance(d time.Duration) { h.clock.Advance(d) }

func (h *harness) admit(claim string) coordinator.Decision {
	h.t.Helper()
	d, err := h.c.Admit(h.t.Context(), h.scope, h.p, claim)
	if err != nil {
		h.t.Fatalf("Admit(%.40q, claim %q): %v", h.scope, claim, err)
	}
	return d
}

func (h *harness) record(outcomes ...coordinator.Outcome) coordinator.Result {
	h.t.Helper()
	return h.recordCtx(h.t.Context(), outcomes...)
}

func (h *harness) recordCtx(ctx context.Context, outcomes ...coordinator.Outcome) coordinator.Result {
	h.t.Helper()
	res, err := h.c.Record(ctx, h.scope, h.p, outcomes)
	if err != nil {
		h.t.Fatalf("Record(%.40q, %v): %v", h.scope, outcomes, err)
	}
	return res
}

func (h *harness) settle(claim string, o coordinator.Outcome) coordinator.Result {
	h.t.Helper()
	res, err := h.c.Settle(h.t.Context(), h.scope, h.p, claim, o)
	if err != nil {
		h.t.Fatalf("Settle(%.40q, claim %q, %+v): %v", h.scope, claim, o, err)
	}
	return res
}

func (h *harness) snapshot() coordinator.Snapshot {
	h.t.Helper()
	s, err := h.c.Snapshot(h.t.Context(), h.scope, h.p)
	if err != nil {
		h.t.Fatalf("Snapshot(%.40q): %v", h.scope, err)
	}
	return s
}

func fail(gen uint64) coordinator.Outcome { return coordinator.Outcome{Generation: gen, Failure: true} }
func ok(gen uint64) coordinator.Outcome   { return coordinator.Outcome{Generation: gen} }
func took(gen uint64, d time.Duration) coordinator.Outcome {
	return coordinator.Outcome{Generation: gen, Duration: d}
}

func (h *harness) wantDecision(what string, d coordinator.Decision, v coordinator.Verdict, s coordinator.State, gen uint64) {
	h.t.Helper()
	if d.Verdict != v || d.State != s || d.Generation != gen {
		h.t.Errorf("%s: Admit = %v in %v, generation %d; want %v in %v, generation %d (decision %+v)",
			what, d.Verdict, d.State, d.Generation, v, s, gen, d)
	}
}

func (h *harness) wantResult(what string, r coordinator.Result, s coordinator.State, gen uint64, stale int) {
	h.t.Helper()
	if r.State != s || r.Generation != gen || r.Stale != stale {
		h.t.Errorf("%s: result %v, generation %d, %d stale; want %v, generation %d, %d stale (result %+v)",
			what, r.State, r.Generation, r.Stale, s, gen, stale, r)
	}
}

// wantTransition checks every field of a transition the operation just
// made, with At read from the clock.
func (h *harness) wantTransition(what string, tr *coordinator.Transition, from, to coordinator.State, gen uint64, reason string) {
	h.t.Helper()
	if tr == nil {
		h.t.Errorf("%s: no transition; want %v -> %v", what, from, to)
		return
	}
	if tr.Scope != h.scope {
		h.t.Errorf("%s: transition scope %.60q; want %.60q", what, tr.Scope, h.scope)
	}
	if tr.From != from || tr.To != to || tr.Generation != gen || tr.Reason != reason {
		h.t.Errorf("%s: transition %v -> %v, generation %d, reason %q; want %v -> %v, generation %d, reason %q",
			what, tr.From, tr.To, tr.Generation, tr.Reason, from, to, gen, reason)
	}
	if !tr.At.Equal(h.now()) {
		h.t.Errorf("%s: transition at %v; want the coordinator's clock in whole milliseconds, %v", what, tr.At, h.now())
	}
}

func (h *harness) wantNoTransition(what string, tr *coordinator.Transition) {
	h.t.Helper()
	if tr != nil {
		h.t.Errorf("%s: unexpected transition %+v", what, *tr)
	}
}

// wantState checks the state and generation a snapshot reports now.
func (h *harness) wantState(what string, s coordinator.State, gen uint64) coordinator.Snapshot {
	h.t.Helper()
	snap := h.snapshot()
	if snap.State != s || snap.Generation != gen {
		h.t.Errorf("%s: snapshot %v, generation %d; want %v, generation %d (snapshot %+v)",
			what, snap.State, snap.Generation, s, gen, snap)
	}
	return snap
}

// trip records failures of the current closed generation, one at a time,
// until the breaker opens, and returns the new generation.
func (h *harness) trip() uint64 {
	h.t.Helper()
	gen := h.snapshot().Generation
	for range 1000 {
		res := h.record(fail(gen))
		if res.Transition != nil {
			if res.Transition.To != coordinator.StateOpen || res.Generation != gen+1 {
				h.t.Fatalf("tripping: transition %+v, result %+v; want open in generation %d", *res.Transition, res, gen+1)
			}
			return res.Generation
		}
	}
	h.t.Fatalf("tripping: 1000 failures did not open the breaker")
	return 0
}

// waitOpenPeriod moves the clock to the end of the open period.
func (h *harness) waitOpenPeriod() {
	h.t.Helper()
	s := h.snapshot()
	if s.OpenUntil.IsZero() {
		h.t.Fatalf("waiting for the open period: snapshot %+v has no OpenUntil", s)
	}
	h.clock.Set(s.OpenUntil)
}

// halfOpen trips the breaker, lets its open period end and admits claims as
// probes. It returns the half-open generation.
func (h *harness) halfOpen(claims ...string) uint64 {
	h.t.Helper()
	gen := h.trip()
	h.waitOpenPeriod()
	for _, c := range claims {
		if d := h.admit(c); d.Verdict != coordinator.Probe || d.Generation != gen {
			h.t.Fatalf("admitting probe %q: %+v; want a probe in generation %d", c, d, gen)
		}
	}
	return gen
}

// recover settles successful probes until the breaker closes and returns
// the closed generation. It must be half-open.
func (h *harness) recover() uint64 {
	h.t.Helper()
	gen := h.snapshot().Generation
	for i := range 1000 {
		claim := fmt.Sprintf("recover-g%d-%d", gen, i)
		d := h.admit(claim)
		if d.Verdict != coordinator.Probe {
			h.t.Fatalf("recovering: Admit = %+v; want a probe", d)
		}
		res := h.settle(claim, ok(gen))
		if res.Transition != nil {
			if res.Transition.To != coordinator.StateClosed || res.Generation != gen+1 {
				h.t.Fatalf("recovering: transition %+v; want closed in generation %d", *res.Transition, gen+1)
			}
			return res.Generation
		}
	}
	h.t.Fatalf("recovering: 1000 successful probes did not close the breaker")
	return 0
}
