package coordinatortest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/cbgrpc/cbgrpc/coordinator"
)

const (
	isolated = coordinator.StateIsolated
	disabled = coordinator.StateDisabled
)

// controller returns the harness's coordinator as a [coordinator.Controller],
// or skips the test.
func (h *harness) controller() coordinator.Controller {
	h.t.Helper()
	c, ok := h.c.(coordinator.Controller)
	if !ok {
		h.t.Skipf("%T does not implement coordinator.Controller", h.c)
	}
	return c
}

// control runs one Controller operation and fails the test on an error.
func (h *harness) control(op string, n coordinator.Note) coordinator.Result {
	h.t.Helper()
	res, err := h.controlErr(op, n)
	if err != nil {
		h.t.Fatalf("%s(%.40q, %+v): %v", op, h.scope, n, err)
	}
	return res
}

func (h *harness) controlErr(op string, n coordinator.Note) (coordinator.Result, error) {
	h.t.Helper()
	c := h.controller()
	ctx := h.t.Context()
	switch op {
	case "isolate":
		return c.Isolate(ctx, h.scope, h.p, n)
	case "release":
		return c.Release(ctx, h.scope, h.p, n)
	case "disable":
		return c.Disable(ctx, h.scope, h.p, n)
	case "enable":
		return c.Enable(ctx, h.scope, h.p, n)
	}
	h.t.Fatalf("unknown Controller operation %q", op)
	return coordinator.Result{}, nil
}

// sameSnapshot compares snapshots field by field, times by the instant
// they stand for.
func sameSnapshot(a, b coordinator.Snapshot) bool {
	for _, s := range []*coordinator.Snapshot{&a, &b} {
		for _, t := range []*time.Time{&s.OpenedAt, &s.OpenUntil, &s.ForcedAt} {
			if !t.IsZero() {
				*t = t.UTC()
			}
		}
	}
	return a == b
}

var (
	outage = coordinator.Note{By: "alice", Reason: "payments outage"}
	fixed  = coordinator.Note{By: "bob", Reason: "fixed in v1.2.3"}
)

func testIsolateRejectsEveryAdmit(t *testing.T, f Factory) {
	h := newHarness(t, f, basePolicy())
	h.controller()
	h.record(ok(0), fail(0))
	res := h.control("isolate", outage)
	h.wantResult("isolating a closed breaker", res, isolated, 1, 0)
	h.wantTransition("isolating a closed breaker", res.Transition, closed, isolated, 1, "isolated by alice: payments outage")
	isolatedAt := h.now()
	s := h.wantState("isolated", isolated, 1)
	want := coordinator.Snapshot{Scope: h.scope, State: isolated, Generation: 1, OpenedAt: isolatedAt, Operator: outage, ForcedAt: isolatedAt}
	if !sameSnapshot(s, want) {
		t.Errorf("snapshot %+v; want %+v: an empty window, no end, the operator's note", s, want)
	}
	for i, claim := range []string{"a", "b", "c"} {
		h.advance(time.Duration(i) * time.Hour)
		d := h.admit(claim)
		h.wantDecision("Admit while isolated", d, reject, isolated, 1)
		if d.RetryAfter != 0 || d.Transition != nil {
			t.Errorf("Admit while isolated until released: %+v; want RetryAfter 0 and no transition", d)
		}
	}
	res = h.record(fail(1), fail(1), fail(1), fail(1), ok(0))
	h.wantResult("Record while isolated", res, isolated, 1, 5)
	h.wantNoTransition("Record while isolated", res.Transition)
	h.wantResult("Settle while isolated", h.settle("a", ok(1)), isolated, 1, 1)

	// Isolating a half-open breaker drops its probes.
	hs := h.on(h.scope + "/half-open")
	gen := hs.halfOpen("p")
	res = hs.control("isolate", outage)
	hs.wantTransition("isolating a half-open breaker", res.Transition, halfOpen, isolated, gen+1, "isolated by alice: payments outage")
	if s := hs.snapshot(); s.ProbesInFlight != 0 || s.ProbeSuccesses != 0 {
		t.Errorf("snapshot %+v; want the probe leases dropped", s)
	}
	hs.wantResult("settling a probe of before the isolation", hs.settle("p", ok(gen)), isolated, gen+1, 1)
	hs.wantDecision("a probe's claim again", hs.admit("p"), reject, isolated, gen+1)
}

func testIsolateForExpiresByItself(t *testing.T, f Factory) {
	h := newHarness(t, f, basePolicy())
	h.controller()
	n := coordinator.Note{By: "alice", Reason: "deploy", For: 500 * time.Millisecond}
	res := h.control("isolate", n)
	h.wantTransition("isolating for 500ms", res.Transition, closed, isolated, 1, "isolated by alice for 500ms: deploy")
	end := h.now().Add(500 * time.Millisecond)
	if s := h.snapshot(); !s.OpenUntil.Equal(end) || s.Operator != n {
		t.Errorf("snapshot %+v; want OpenUntil %v and the note", s, end)
	}
	h.advance(499 * time.Millisecond)
	d := h.admit("a")
	h.wantDecision("1ms before the end", d, reject, isolated, 1)
	if d.RetryAfter != time.Millisecond {
		t.Errorf("1ms before the end: RetryAfter %v; want 1ms", d.RetryAfter)
	}
	h.advance(time.Millisecond)
	// As of now it is released, but nothing moved yet.
	for range 2 {
		s := h.wantState("at the end", closed, 2)
		if want := (coordinator.Snapshot{Scope: h.scope, State: closed, Generation: 2, OpenedAt: end.Add(-500 * time.Millisecond)}); !sameSnapshot(s, want) {
			t.Errorf("snapshot at the end %+v; want %+v", s, want)
		}
	}
	h.wantResult("Record at the end, before any Admit", h.record(ok(2)), closed, 2, 1)
	d = h.admit("b")
	h.wantDecision("first Admit after the end", d, allow, closed, 2)
	h.wantTransition("first Admit after the end", d.Transition, isolated, closed, 2, coordinator.IsolationEnded)
	h.wantNoTransition("second Admit", h.admit("c").Transition)
	h.wantResult("Record after the release", h.record(ok(2), fail(2)), closed, 2, 0)
	if s := h.wantState("after the release", closed, 2); s.Calls != 2 || s.Operator != (coordinator.Note{}) || !s.ForcedAt.IsZero() {
		t.Errorf("snapshot %+v; want 2 calls counted and no operator note", s)
	}

	// An operation of an operator after the end releases the breaker
	// first, and reports its own transition.
	o := h.on(h.scope + "/then-disabled")
	o.control("isolate", n)
	h.advance(time.Second)
	res = o.control("disable", outage)
	o.wantResult("disabling after the isolation ended", res, disabled, 3, 0)
	o.wantTransition("disabling after the isolation ended", res.Transition, closed, disabled, 3, "disabled by alice: payments outage")
	res = o.on(o.scope+"/released").control("isolate", n)
	h.advance(time.Second)
	res = o.on(o.scope+"/released").control("release", fixed)
	o.on(o.scope+"/released").wantTransition("releasing after the isolation ended", res.Transition, isolated, closed, 2, coordinator.IsolationEnded)
}

func testReleaseClosesWithNewGeneration(t *testing.T, f Factory) {
	h := newHarness(t, f, basePolicy())
	h.controller()
	h.control("isolate", outage)
	res := h.control("release", fixed)
	h.wantResult("releasing an isolated breaker", res, closed, 2, 0)
	h.wantTransition("releasing an isolated breaker", res.Transition, isolated, closed, 2, "released by bob: fixed in v1.2.3")
	if s := h.wantState("released", closed, 2); s.Operator != (coordinator.Note{}) || !s.ForcedAt.IsZero() || !s.OpenUntil.IsZero() || s.Calls != 0 {
		t.Errorf("snapshot %+v; want no note, no end, an empty window", s)
	}
	h.wantDecision("after the release", h.admit("a"), allow, closed, 2)

	res = h.control("release", fixed)
	h.wantResult("releasing a closed breaker", res, closed, 2, 0)
	h.wantNoTransition("releasing a closed breaker", res.Transition)

	// An open breaker closes at once, a half-open one drops its probes.
	o := h.on(h.scope + "/open")
	gen := o.trip()
	res = o.control("release", coordinator.Note{})
	o.wantResult("releasing an open breaker", res, closed, gen+1, 0)
	o.wantTransition("releasing an open breaker", res.Transition, open, closed, gen+1, "released")
	hs := h.on(h.scope + "/half-open")
	gen = hs.halfOpen("p")
	hs.record(fail(gen))
	res = hs.control("release", fixed)
	hs.wantTransition("releasing a half-open breaker", res.Transition, halfOpen, closed, gen+1, "released by bob: fixed in v1.2.3")
	hs.wantResult("settling a probe of before the release", hs.settle("p", ok(gen)), closed, gen+1, 1)
	hs.wantResult("an outcome of before the release", hs.record(fail(gen)), closed, gen+1, 1)
	if s := hs.snapshot(); s.Calls != 0 || s.ProbesInFlight != 0 {
		t.Errorf("snapshot %+v; want an empty window and no probes", s)
	}

	// A disabled breaker is released into a new generation too.
	d := h.on(h.scope + "/disabled")
	d.control("disable", outage)
	d.record(fail(1), fail(1))
	res = d.control("release", fixed)
	d.wantResult("releasing a disabled breaker", res, closed, 2, 0)
	d.wantTransition("releasing a disabled breaker", res.Transition, disabled, closed, 2, "released by bob: fixed in v1.2.3")
	if s := d.snapshot(); s.Calls != 0 {
		t.Errorf("snapshot %+v; want the window emptied", s)
	}
}

func testDisableAllowsAndNeverTrips(t *testing.T, f Factory) {
	h := newHarness(t, f, basePolicy())
	h.controller()
	h.record(fail(0), fail(0), fail(0))
	res := h.control("disable", outage)
	h.wantResult("disabling a closed breaker", res, disabled, 1, 0)
	h.wantTransition("disabling a closed breaker", res.Transition, closed, disabled, 1, "disabled by alice: payments outage")
	if s := h.snapshot(); s.Calls != 0 || s.ConsecutiveFailures != 0 {
		t.Errorf("snapshot %+v; want a new generation with an empty window", s)
	}
	h.wantResult("an outcome of before disabling", h.record(fail(0)), disabled, 1, 1)
	d := h.admit("a")
	h.wantDecision("Admit while disabled", d, allow, disabled, 1)
	h.wantNoTransition("Admit while disabled", d.Transition)
	for range 5 {
		res = h.record(fail(1), fail(1), took(1, time.Hour))
		h.wantResult("failures while disabled", res, disabled, 1, 0)
		h.wantNoTransition("failures while disabled", res.Transition)
	}
	s := h.wantState("disabled", disabled, 1)
	if s.Calls != 15 || s.Failures != 10 || s.ConsecutiveFailures != 0 || s.Operator != outage || !s.ForcedAt.Equal(h.now()) {
		t.Errorf("snapshot %+v; want 15 calls, 10 failures counted, the note, forced now", s)
	}
	h.wantResult("outcomes of another generation", h.record(fail(2)), disabled, 1, 1)
	h.advance(1000 * time.Hour)
	h.wantState("a long time after disabling", disabled, 1)
	h.wantDecision("a long time after disabling", h.admit("b"), allow, disabled, 1)
	h.wantResult("Settle while disabled", h.settle("a", ok(1)), disabled, 1, 1)

	res = h.control("disable", fixed)
	h.wantResult("disabling again", res, disabled, 1, 0)
	h.wantNoTransition("disabling again", res.Transition)
	if s := h.snapshot(); s.Operator != fixed {
		t.Errorf("snapshot %+v; want the new note", s)
	}

	// An open breaker lets calls through at once.
	o := h.on(h.scope + "/open")
	gen := o.trip()
	res = o.control("disable", outage)
	o.wantTransition("disabling an open breaker", res.Transition, open, disabled, gen+1, "disabled by alice: payments outage")
	o.wantDecision("Admit after disabling an open breaker", o.admit("a"), allow, disabled, gen+1)
	if s := o.snapshot(); !s.OpenUntil.IsZero() {
		t.Errorf("snapshot %+v; want no OpenUntil", s)
	}
	hs := h.on(h.scope + "/half-open")
	gen = hs.halfOpen("p")
	hs.control("disable", outage)
	hs.wantResult("settling a probe of before disabling", hs.settle("p", ok(gen)), disabled, gen+1, 1)
	if s := hs.snapshot(); s.ProbesInFlight != 0 {
		t.Errorf("snapshot %+v; want the probe leases dropped", s)
	}
}

func testEnableRestoresNormalRules(t *testing.T, f Factory) {
	h := newHarness(t, f, basePolicy())
	h.controller()
	h.control("disable", outage)
	h.record(fail(1), fail(1), fail(1))
	h.wantDecision("a call in flight when enabling", h.admit("a"), allow, disabled, 1)
	res := h.control("enable", fixed)
	h.wantResult("enabling", res, closed, 1, 0)
	h.wantTransition("enabling", res.Transition, disabled, closed, 1, "enabled by bob: fixed in v1.2.3")
	s := h.wantState("enabled", closed, 1)
	if s.Calls != 3 || s.Operator != (coordinator.Note{}) || !s.ForcedAt.IsZero() {
		t.Errorf("snapshot %+v; want the 3 calls counted while disabled kept, and no note", s)
	}
	h.wantDecision("Admit after enabling", h.admit("b"), allow, closed, 1)
	res = h.record(fail(1))
	h.wantTransition("the next failure, of a call admitted while disabled", res.Transition, closed, open, 2, "failures 4/4 >= 50%")

	res = h.control("enable", fixed)
	h.wantResult("enabling an open breaker", res, open, 2, 0)
	h.wantNoTransition("enabling an open breaker", res.Transition)
	i := h.on(h.scope + "/isolated")
	i.control("isolate", outage)
	res = i.control("enable", fixed)
	i.wantResult("enabling an isolated breaker", res, isolated, 1, 0)
	i.wantNoTransition("enabling an isolated breaker", res.Transition)

	// Enabled, the state is kept a window after the last outcome, like any
	// closed state.
	e := h.on(h.scope + "/forgotten")
	e.control("disable", outage)
	e.advance(time.Hour)
	e.control("enable", coordinator.Note{})
	forget := e.now().Truncate(e.p.BucketWidth()).Add(e.p.Window)
	e.clock.Set(forget.Add(-time.Millisecond))
	e.wantState("1ms before a window after enabling", closed, 1)
	e.clock.Set(forget)
	if s := e.snapshot(); s != (coordinator.Snapshot{Scope: e.scope}) {
		t.Errorf("snapshot a window after enabling: %+v; want a forgotten scope", s)
	}
}

func testManualStatesNeverExpire(t *testing.T, f Factory) {
	h := newHarness(t, f, basePolicy())
	h.controller()
	d := h.on(h.scope + "/disabled")
	h.control("isolate", outage)
	d.control("disable", outage)
	h.advance(10000 * time.Hour)
	if s := h.wantState("a long time after isolating", isolated, 1); s.Operator != outage {
		t.Errorf("snapshot %+v; want the note kept", s)
	}
	if s := d.wantState("a long time after disabling", disabled, 1); s.Operator != outage {
		t.Errorf("snapshot %+v; want the note kept", s)
	}
	h.wantDecision("a long time after isolating", h.admit("a"), reject, isolated, 1)
}

// testManualStatesAreTransitions checks that every transition an operator
// makes goes out on the optional transition feed, as returned, in order,
// including the end of an isolation released by the next operation.
func testManualStatesAreTransitions(t *testing.T, f Factory) {
	h := newHarness(t, f, basePolicy())
	h.controller()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	watch := h.watch(ctx)
	var want []coordinator.Transition
	add := func(tr *coordinator.Transition) {
		t.Helper()
		if tr == nil {
			t.Fatalf("no transition after %d", len(want))
		}
		want = append(want, *tr)
	}
	add(h.control("isolate", outage).Transition)
	add(h.control("release", fixed).Transition)
	add(h.control("disable", outage).Transition)
	h.control("disable", outage) // no transition
	add(h.control("enable", fixed).Transition)
	add(h.control("isolate", coordinator.Note{Reason: "one second", For: time.Second}).Transition)
	h.advance(time.Second)
	// The end of the isolation, then the new one.
	gen := h.snapshot().Generation
	want = append(want, coordinator.Transition{Scope: h.scope, From: isolated, To: closed, Generation: gen, At: h.now(), Reason: coordinator.IsolationEnded})
	add(h.control("isolate", coordinator.Note{Reason: "again", For: time.Second}).Transition)
	h.advance(time.Second)
	add(h.admit("a").Transition)

	wantTransitions(t, ctx, watch, want)
}

func testInvalidNoteIsAnError(t *testing.T, f Factory) {
	h := newHarness(t, f, basePolicy())
	h.controller()
	for _, c := range []struct {
		op   string
		note coordinator.Note
	}{
		{"isolate", coordinator.Note{By: "alice"}},
		{"isolate", coordinator.Note{Reason: "  "}},
		{"disable", coordinator.Note{}},
		{"isolate", coordinator.Note{Reason: "x", For: -time.Second}},
		{"isolate", coordinator.Note{Reason: "x", For: time.Microsecond}},
		{"disable", coordinator.Note{Reason: "x", For: time.Second}},
		{"release", coordinator.Note{For: time.Second}},
		{"isolate", coordinator.Note{Reason: "two\nlines"}},
		{"enable", coordinator.Note{By: "tab\tby"}},
		{"isolate", coordinator.Note{Reason: string(make([]byte, coordinator.MaxNoteReason+1))}},
	} {
		_, err := h.controlErr(c.op, c.note)
		if !errors.Is(err, coordinator.ErrInvalidNote) {
			t.Errorf("%s with %+.60v: error %v; want one wrapping coordinator.ErrInvalidNote", c.op, c.note, err)
		}
	}
	bad := basePolicy()
	bad.Buckets = 0
	_, err := h.controller().Isolate(h.t.Context(), h.scope, bad, outage)
	if !errors.Is(err, coordinator.ErrInvalidPolicy) {
		t.Errorf("Isolate with Buckets 0: error %v; want one wrapping coordinator.ErrInvalidPolicy", err)
	}
	if s := h.snapshot(); s != (coordinator.Snapshot{Scope: h.scope}) {
		t.Errorf("snapshot %+v; an invalid note or policy must change nothing", s)
	}
}
