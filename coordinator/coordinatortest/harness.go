package coordinatortest

import (
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/cbgrpc/cbgrpc/coordinator"
	"github.com/cbgrpc/cbgrpc/coordinator/implement"
)

const (
	closed   = coordinator.StateClosed
	open     = coordinator.StateOpen
	halfOpen = coordinator.StateHalfOpen
	isolated = coordinator.StateIsolated
	disabled = coordinator.StateDisabled

	allow  = coordinator.Allow
	probe  = coordinator.Probe
	reject = coordinator.Reject
)

// harness drives one scope of one coordinator under a fake clock and fails
// the test on any error the coordinator returns.
type harness struct {
	t     *testing.T
	c     coordinator.Coordinator
	clock *Clock
	p     coordinator.Policy
	scope string
	// replica is the replica the harness records as (RecordRequest.Replica).
	replica string
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
	clock := NewClock()
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

// next is the generation that a transition or a birth mints now after
// prev, by rule 4 of the contract (docs/architecture.md). Tests never write a generation down;
// they take it from an answer and this rule.
func (h *harness) next(prev uint64) uint64 { return implement.NextGeneration(prev, h.now()) }

func (h *harness) admit(claim string) coordinator.Decision {
	h.t.Helper()
	return h.admitSeen(0, claim)
}

// admitSeen admits for a caller that has seen generation seen.
func (h *harness) admitSeen(seen uint64, claim string) coordinator.Decision {
	h.t.Helper()
	d, err := h.c.Admit(h.t.Context(), coordinator.AdmitRequest{Scope: h.scope, Policy: h.p, Claim: claim, Seen: seen})
	if err != nil {
		h.t.Fatalf("Admit(%.40q, claim %q): %v", h.scope, claim, err)
	}
	return d
}

func (h *harness) record(outcomes ...coordinator.Outcome) coordinator.Result {
	h.t.Helper()
	return h.send(coordinator.RecordRequest{Outcomes: outcomes})
}

// recordBatch records outcomes as the batch of ID id.
func (h *harness) recordBatch(id string, outcomes ...coordinator.Outcome) coordinator.Result {
	h.t.Helper()
	return h.send(coordinator.RecordRequest{Outcomes: outcomes, BatchID: id})
}

// send makes the Record q, of the harness's scope, policy and replica.
func (h *harness) send(q coordinator.RecordRequest) coordinator.Result {
	h.t.Helper()
	q.Scope, q.Policy, q.Replica = h.scope, h.p, h.replica
	res, err := h.c.Record(h.t.Context(), q)
	if err != nil {
		h.t.Fatalf("Record(%.40q, %+v): %v", h.scope, q, err)
	}
	return res
}

// as returns a harness of the same scope that records as replica.
func (h *harness) as(replica string) *harness {
	o := *h
	o.replica = replica
	return &o
}

func (h *harness) settle(claim string, o coordinator.Outcome) coordinator.Result {
	h.t.Helper()
	res, err := h.c.Settle(h.t.Context(), coordinator.SettleRequest{Scope: h.scope, Policy: h.p, Claim: claim, Outcome: o})
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

// asProbe marks o as an outlier's probe.
func asProbe(o coordinator.Outcome) coordinator.Outcome { o.Probe = true; return o }
func took(gen uint64, d time.Duration) coordinator.Outcome {
	return coordinator.Outcome{Generation: gen, Duration: d}
}

// closedGen admits a call of the closed breaker, giving birth to the scope
// if it is not born, and returns the generation the call belongs to: the
// one a caller learns and records its outcome under.
func (h *harness) closedGen() uint64 {
	h.t.Helper()
	d := h.admit("closed-gen")
	if d.Verdict != allow || d.State != closed || d.Generation == 0 {
		h.t.Fatalf("admitting a call of the closed breaker: %+v; want Allow in a generation other than 0", d)
	}
	return d.Generation
}

// asResult is a decision as a Result, for tables of operations that give
// either.
func asResult(d coordinator.Decision) coordinator.Result {
	return coordinator.Result{State: d.State, Generation: d.Generation, RetryAfter: d.RetryAfter, Transition: d.Transition}
}

func (h *harness) wantDecision(what string, d coordinator.Decision, v coordinator.Verdict, s coordinator.State, gen uint64) {
	h.t.Helper()
	if d.Verdict != v || d.State != s || d.Generation != gen {
		h.t.Errorf("%s: Admit = %v in %v, generation %d; want %v in %v, generation %d (decision %+v)",
			what, d.Verdict, d.State, d.Generation, v, s, gen, d)
	}
}

// wantRejected checks that Admit rejected the call in state s and
// generation gen, with no transition, and told it to come back after
// retryAfter.
func (h *harness) wantRejected(what string, d coordinator.Decision, s coordinator.State, gen uint64, retryAfter time.Duration) {
	h.t.Helper()
	h.wantDecision(what, d, reject, s, gen)
	if d.RetryAfter != retryAfter || d.Transition != nil {
		h.t.Errorf("%s: Admit = %+v; want RetryAfter %v and no transition", what, d, retryAfter)
	}
}

// wantResult checks a result's state, generation and stale count, and that
// RetryAfter is zero unless the breaker is open or isolated (the values
// are pinned by tests of their own).
func (h *harness) wantResult(what string, r coordinator.Result, s coordinator.State, gen uint64, stale int) {
	h.t.Helper()
	if r.State != s || r.Generation != gen || r.Stale != stale {
		h.t.Errorf("%s: result %v, generation %d, %d stale; want %v, generation %d, %d stale (result %+v)",
			what, r.State, r.Generation, r.Stale, s, gen, stale, r)
	}
	switch {
	case r.State == open && (r.RetryAfter <= 0 || r.RetryAfter > max(h.p.OpenFor, h.p.MaxOpenFor)):
		h.t.Errorf("%s: open, RetryAfter %v; want the rest of an open period", what, r.RetryAfter)
	case r.State != open && r.State != isolated && r.RetryAfter != 0:
		h.t.Errorf("%s: %v, RetryAfter %v; want 0", what, r.State, r.RetryAfter)
	}
}

// wantNoTrip records outcomes in the closed generation gen and checks
// that the breaker stays closed in it.
func (h *harness) wantNoTrip(what string, gen uint64, outcomes ...coordinator.Outcome) {
	h.t.Helper()
	res := h.record(outcomes...)
	h.wantResult(what, res, closed, gen, 0)
	h.wantNoTransition(what, res.Transition)
}

// wantTrip records outcomes in the closed generation gen and checks that
// the last of them trips the breaker for reason, into a new generation,
// which it returns.
func (h *harness) wantTrip(what string, gen uint64, reason string, outcomes ...coordinator.Outcome) uint64 {
	h.t.Helper()
	res := h.record(outcomes...)
	h.wantResult(what, res, open, h.next(gen), 0)
	h.wantTransition(what, res.Transition, closed, open, h.next(gen), reason)
	return res.Generation
}

// wantTransition checks every field of a transition the operation just
// made, with At read from the clock. OpenUntil is checked to lie within
// an open period of the policy for a transition to open, and to be zero
// for one to closed, half-open or disabled; tests of their own pin it.
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
	switch period := tr.OpenUntil.Sub(tr.At); {
	case to == open && (period < h.p.OpenFor || period > max(h.p.OpenFor, h.p.MaxOpenFor)):
		h.t.Errorf("%s: transition to open until %v, %v after it; want the end of an open period", what, tr.OpenUntil, period)
	case to != open && to != isolated && !tr.OpenUntil.IsZero():
		h.t.Errorf("%s: transition to %v until %v; want no OpenUntil", what, to, tr.OpenUntil)
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

// wantNotBorn checks that the scope reads as not born: closed in
// generation 0 with nothing else.
func (h *harness) wantNotBorn(what string) {
	h.t.Helper()
	if s := h.snapshot(); !reflect.DeepEqual(s, coordinator.Snapshot{Scope: h.scope}) {
		h.t.Errorf("%s: snapshot %+v; want a scope not born: closed in generation 0 with nothing counted", what, s)
	}
}

// trip records failures of the current closed generation, one at a time,
// until the breaker opens, and returns the new generation.
func (h *harness) trip() uint64 {
	h.t.Helper()
	return h.tripTransition().Generation
}

// tripTransition trips the breaker as trip does and returns the transition.
func (h *harness) tripTransition() coordinator.Transition {
	h.t.Helper()
	gen := h.closedGen()
	for range 1000 {
		res := h.record(fail(gen))
		if res.Transition != nil {
			if res.Transition.To != open || res.Generation != h.next(gen) {
				h.t.Fatalf("tripping: transition %+v, result %+v; want open in generation %d", *res.Transition, res, h.next(gen))
			}
			return *res.Transition
		}
	}
	h.t.Fatalf("tripping: 1000 failures did not open the breaker")
	return coordinator.Transition{}
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
		if d := h.admit(c); d.Verdict != probe || d.Generation != gen {
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
		claim := fmt.Sprintf("recover-%d-%d", gen, i)
		d := h.admit(claim)
		if d.Verdict != probe {
			h.t.Fatalf("recovering: Admit = %+v; want a probe", d)
		}
		res := h.settle(claim, ok(gen))
		if res.Transition != nil {
			if res.Transition.To != closed || res.Generation != h.next(gen) {
				h.t.Fatalf("recovering: transition %+v; want closed in generation %d", *res.Transition, h.next(gen))
			}
			return res.Generation
		}
	}
	h.t.Fatalf("recovering: 1000 successful probes did not close the breaker")
	return 0
}

// forgetAt is when a closed scope last written at lastWrite (born,
// closed, enabled or given an outcome) is forgotten: when the bucket of
// lastWrite leaves the window.
func (h *harness) forgetAt(lastWrite time.Time) time.Time {
	return lastWrite.Truncate(h.p.BucketWidth()).Add(h.p.Window)
}

// forget moves the clock to forgetAt(lastWrite).
func (h *harness) forget(lastWrite time.Time) { h.clock.Set(h.forgetAt(lastWrite)) }

// wantForgottenAt checks that the closed scope is kept in generation gen
// until the millisecond before forget, reads as not born from forget on,
// and is born again above gen by the next Admit.
func (h *harness) wantForgottenAt(what string, forget time.Time, gen uint64) {
	h.t.Helper()
	h.clock.Set(forget.Add(-time.Millisecond))
	h.wantState(what+", 1ms before it is forgotten", closed, gen)
	h.clock.Set(forget)
	h.wantNotBorn(what + ", when it is forgotten")
	h.wantDecision(what+", the next Admit", h.admit("after forgetting"), allow, closed, h.next(gen))
}
