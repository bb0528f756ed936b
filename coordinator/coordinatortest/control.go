package coordinatortest

import (
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/cbgrpc/cbgrpc/coordinator"
	"github.com/cbgrpc/cbgrpc/coordinator/implement"
)

// The optional operators' commands ([coordinator.Controller]): Isolate,
// Release and Disable start a new generation, Enable keeps it; manual
// states never expire, and an isolation for a set time ends lazily, at the
// first operation other than Snapshot after its end.

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
		return c.Isolate(ctx, coordinator.CommandRequest{Scope: h.scope, Policy: h.p, Note: n})
	case "release":
		return c.Release(ctx, coordinator.CommandRequest{Scope: h.scope, Policy: h.p, Note: n})
	case "disable":
		return c.Disable(ctx, coordinator.CommandRequest{Scope: h.scope, Policy: h.p, Note: n})
	case "enable":
		return c.Enable(ctx, coordinator.CommandRequest{Scope: h.scope, Policy: h.p, Note: n})
	}
	h.t.Fatalf("unknown Controller operation %q", op)
	return coordinator.Result{}, nil
}

// sameSnapshot compares snapshots field by field, times by the instant
// they stand for.
func sameSnapshot(a, b coordinator.Snapshot) bool {
	for _, s := range []*coordinator.Snapshot{&a, &b} {
		for _, t := range []*time.Time{&s.OpenedAt, &s.OpenUntil, &s.ForcedAt, &s.LastTrip.At} {
			if !t.IsZero() {
				*t = t.UTC()
			}
		}
	}
	if !samePolicies(a.Policies, b.Policies) || !sameOutliers(a.Outliers, b.Outliers) {
		return false
	}
	a.Policies, b.Policies = nil, nil
	a.Outliers, b.Outliers = nil, nil
	return reflect.DeepEqual(a, b)
}

var (
	outage = coordinator.Note{By: "alice", Reason: "payments outage"}
	fixed  = coordinator.Note{By: "bob", Reason: "fixed in v1.2.3"}
)

func testIsolateRejectsEveryAdmit(t *testing.T, f Factory) {
	h := newHarness(t, f, basePolicy())
	h.controller()
	gen := h.closedGen()
	h.record(ok(gen), fail(gen))
	res := h.control("isolate", outage)
	iso := h.next(gen)
	h.wantResult("isolating a closed breaker", res, isolated, iso, 0)
	h.wantTransition("isolating a closed breaker", res.Transition, closed, isolated, iso, "isolated by alice: payments outage")
	if res.RetryAfter != 0 || res.Transition == nil || !res.Transition.OpenUntil.IsZero() {
		t.Errorf("isolating until released: %+v; want no RetryAfter and no OpenUntil", res)
	}
	isolatedAt := h.now()
	s := h.wantState("isolated", isolated, iso)
	want := coordinator.Snapshot{Scope: h.scope, State: isolated, Generation: iso, OpenedAt: isolatedAt, Operator: outage, ForcedAt: isolatedAt,
		Policies: []coordinator.CarriedPolicy{seen(h.p, coordinator.SourceCode, isolatedAt)}}
	if !sameSnapshot(s, want) {
		t.Errorf("snapshot %+v; want %+v: an empty window, no end, the operator's note", s, want)
	}
	for i, claim := range []string{"a", "b", "c"} {
		h.advance(time.Duration(i) * time.Hour)
		h.wantRejected("Admit while isolated until released", h.admit(claim), isolated, iso, 0)
	}
	res = h.record(fail(iso), fail(iso), fail(iso), fail(iso), ok(gen))
	h.wantResult("Record while isolated", res, isolated, iso, 5)
	h.wantNoTransition("Record while isolated", res.Transition)
	h.wantResult("Settle while isolated", h.settle("a", ok(iso)), isolated, iso, 1)

	// Isolating a half-open breaker drops its probes.
	hs := h.on(h.scope + "/half-open")
	gen = hs.halfOpen("p")
	res = hs.control("isolate", outage)
	iso = hs.next(gen)
	hs.wantTransition("isolating a half-open breaker", res.Transition, halfOpen, isolated, iso, "isolated by alice: payments outage")
	if s := hs.snapshot(); s.ProbesInFlight != 0 || s.ProbeSuccesses != 0 {
		t.Errorf("snapshot %+v; want the probe leases dropped", s)
	}
	hs.wantResult("settling a probe of before the isolation", hs.settle("p", ok(gen)), isolated, iso, 1)
	hs.wantDecision("a probe's claim again", hs.admit("p"), reject, isolated, iso)
}

// testIsolateForEndsByItself: an isolation for a set time says when it
// ends (Result.RetryAfter, Transition.OpenUntil), reads as not born from
// its end on, and ends at the next write, in a new generation.
func testIsolateForEndsByItself(t *testing.T, f Factory) {
	h := newHarness(t, f, basePolicy())
	h.controller()
	gen := h.closedGen()
	n := coordinator.Note{By: "alice", Reason: "deploy", For: 500 * time.Millisecond}
	res := h.control("isolate", n)
	iso, end := h.next(gen), h.now().Add(500*time.Millisecond)
	h.wantResult("isolating for 500ms", res, isolated, iso, 0)
	h.wantTransition("isolating for 500ms", res.Transition, closed, isolated, iso, "isolated by alice for 500ms: deploy")
	if res.RetryAfter != 500*time.Millisecond || res.Transition == nil || !res.Transition.OpenUntil.Equal(end) {
		t.Errorf("isolating for 500ms: %+v; want RetryAfter 500ms and OpenUntil %v", res, end)
	}
	if s := h.snapshot(); !s.OpenUntil.Equal(end) || s.Operator != n {
		t.Errorf("snapshot %+v; want OpenUntil %v and the note", s, end)
	}
	h.advance(100 * time.Millisecond)
	if res := h.record(ok(iso)); res.RetryAfter != 400*time.Millisecond {
		t.Errorf("Record 100ms into the isolation: %+v; want RetryAfter 400ms", res)
	}
	h.advance(399 * time.Millisecond)
	h.wantRejected("1ms before the end", h.admit("a"), isolated, iso, time.Millisecond)
	h.advance(time.Millisecond)
	for range 2 {
		h.wantNotBorn("at the end, looking")
	}
	d := h.admit("b")
	ended := h.next(iso)
	h.wantDecision("first Admit after the end", d, allow, closed, ended)
	h.wantTransition("first Admit after the end", d.Transition, isolated, closed, ended, implement.IsolationEnded)
	h.wantNoTransition("second Admit", h.admit("c").Transition)
	h.wantResult("Record after the end", h.record(ok(ended), fail(ended)), closed, ended, 0)
	if s := h.wantState("after the end", closed, ended); s.Calls != 2 || s.Operator != (coordinator.Note{}) || !s.ForcedAt.IsZero() {
		t.Errorf("snapshot %+v; want 2 calls counted and no operator note", s)
	}
}

// testIsolationEndsLazilyOnEveryWrite: every operation but Snapshot first
// ends an isolation whose time has passed, in a new generation with an
// empty window, then does its own work on the closed breaker, and reports
// the end unless it makes a transition of its own.
func testIsolationEndsLazilyOnEveryWrite(t *testing.T, f Factory) {
	for _, w := range []struct {
		op    string
		do    func(h *harness, iso uint64) coordinator.Result
		state coordinator.State
		own   string // the reason of the operation's own transition; "" for none
		stale int
	}{
		{"Admit", func(h *harness, _ uint64) coordinator.Result { return asResult(h.admit("a")) }, closed, "", 0},
		{"Record", func(h *harness, iso uint64) coordinator.Result { return h.record(fail(iso), ok(iso)) }, closed, "", 2},
		{"Settle", func(h *harness, iso uint64) coordinator.Result { return h.settle("p", ok(iso)) }, closed, "", 1},
		{"Isolate", func(h *harness, _ uint64) coordinator.Result { return h.control("isolate", outage) }, isolated, "isolated by alice: payments outage", 0},
		{"Release", func(h *harness, _ uint64) coordinator.Result { return h.control("release", fixed) }, closed, "", 0},
		{"Disable", func(h *harness, _ uint64) coordinator.Result { return h.control("disable", outage) }, disabled, "disabled by alice: payments outage", 0},
		{"Enable", func(h *harness, _ uint64) coordinator.Result { return h.control("enable", fixed) }, closed, "", 0},
	} {
		t.Run(w.op, func(t *testing.T) {
			h := newHarness(t, f, basePolicy())
			h.controller()
			h.closedGen()
			iso := h.control("isolate", coordinator.Note{Reason: "deploy", For: 100 * time.Millisecond}).Generation
			h.advance(100 * time.Millisecond)
			h.wantNotBorn("at the end of the isolation")
			res := w.do(h, iso)
			ended := h.next(iso)
			if w.own == "" {
				h.wantResult(w.op+" after the end", res, w.state, ended, w.stale)
				h.wantTransition(w.op+" after the end", res.Transition, isolated, closed, ended, implement.IsolationEnded)
			} else {
				h.wantResult(w.op+" after the end", res, w.state, h.next(ended), w.stale)
				h.wantTransition(w.op+" after the end", res.Transition, closed, w.state, h.next(ended), w.own)
			}
			if s := h.wantState("after "+w.op, w.state, res.Generation); s.Calls != 0 {
				t.Errorf("snapshot %+v; want an empty window", s)
			}
		})
	}
}

func testReleaseClosesWithNewGeneration(t *testing.T, f Factory) {
	h := newHarness(t, f, basePolicy())
	h.controller()
	iso := h.control("isolate", outage).Generation
	res := h.control("release", fixed)
	released := h.next(iso)
	h.wantResult("releasing an isolated breaker", res, closed, released, 0)
	h.wantTransition("releasing an isolated breaker", res.Transition, isolated, closed, released, "released by bob: fixed in v1.2.3")
	if s := h.wantState("released", closed, released); s.Operator != (coordinator.Note{}) || !s.ForcedAt.IsZero() || !s.OpenUntil.IsZero() || s.Calls != 0 {
		t.Errorf("snapshot %+v; want no note, no end, an empty window", s)
	}
	h.wantDecision("after the release", h.admit("a"), allow, closed, released)

	res = h.control("release", fixed)
	h.wantResult("releasing a closed breaker", res, closed, released, 0)
	h.wantNoTransition("releasing a closed breaker", res.Transition)

	// An open breaker closes at once, a half-open one drops its probes.
	o := h.on(h.scope + "/open")
	gen := o.trip()
	res = o.control("release", coordinator.Note{})
	o.wantResult("releasing an open breaker", res, closed, o.next(gen), 0)
	o.wantTransition("releasing an open breaker", res.Transition, open, closed, o.next(gen), "released")
	hs := h.on(h.scope + "/half-open")
	gen = hs.halfOpen("p")
	hs.record(fail(gen))
	res = hs.control("release", fixed)
	released = hs.next(gen)
	hs.wantTransition("releasing a half-open breaker", res.Transition, halfOpen, closed, released, "released by bob: fixed in v1.2.3")
	hs.wantResult("settling a probe of before the release", hs.settle("p", ok(gen)), closed, released, 1)
	hs.wantResult("an outcome of before the release", hs.record(fail(gen)), closed, released, 1)
	if s := hs.snapshot(); s.Calls != 0 || s.ProbesInFlight != 0 {
		t.Errorf("snapshot %+v; want an empty window and no probes", s)
	}

	// A disabled breaker is released into a new generation too.
	d := h.on(h.scope + "/disabled")
	gen = d.control("disable", outage).Generation
	d.record(fail(gen), fail(gen))
	res = d.control("release", fixed)
	d.wantResult("releasing a disabled breaker", res, closed, d.next(gen), 0)
	d.wantTransition("releasing a disabled breaker", res.Transition, disabled, closed, d.next(gen), "released by bob: fixed in v1.2.3")
	if s := d.snapshot(); s.Calls != 0 {
		t.Errorf("snapshot %+v; want the window emptied", s)
	}
}

func testDisableAllowsAndNeverTrips(t *testing.T, f Factory) {
	h := newHarness(t, f, basePolicy())
	h.controller()
	gen := h.closedGen()
	h.record(fail(gen), fail(gen), fail(gen))
	res := h.control("disable", outage)
	dis := h.next(gen)
	h.wantResult("disabling a closed breaker", res, disabled, dis, 0)
	h.wantTransition("disabling a closed breaker", res.Transition, closed, disabled, dis, "disabled by alice: payments outage")
	if s := h.snapshot(); s.Calls != 0 || s.ConsecutiveFailures != 0 {
		t.Errorf("snapshot %+v; want a new generation with an empty window", s)
	}
	h.wantResult("an outcome of before disabling", h.record(fail(gen)), disabled, dis, 1)
	d := h.admit("a")
	h.wantDecision("Admit while disabled", d, allow, disabled, dis)
	h.wantNoTransition("Admit while disabled", d.Transition)
	for range 5 {
		res = h.record(fail(dis), fail(dis), took(dis, time.Hour))
		h.wantResult("failures while disabled", res, disabled, dis, 0)
		h.wantNoTransition("failures while disabled", res.Transition)
	}
	s := h.wantState("disabled", disabled, dis)
	if s.Calls != 15 || s.Failures != 10 || s.ConsecutiveFailures != 0 || s.Operator != outage || !s.ForcedAt.Equal(h.now()) {
		t.Errorf("snapshot %+v; want 15 calls, 10 failures counted, the note, forced now", s)
	}
	h.wantResult("outcomes of another generation", h.record(fail(dis-1)), disabled, dis, 1)
	h.advance(1000 * time.Hour)
	h.wantState("a long time after disabling", disabled, dis)
	h.wantDecision("a long time after disabling", h.admit("b"), allow, disabled, dis)
	h.wantResult("Settle while disabled", h.settle("a", ok(dis)), disabled, dis, 1)

	res = h.control("disable", fixed)
	h.wantResult("disabling again", res, disabled, dis, 0)
	h.wantNoTransition("disabling again", res.Transition)
	if s := h.snapshot(); s.Operator != fixed {
		t.Errorf("snapshot %+v; want the new note", s)
	}

	// An open breaker lets calls through at once.
	o := h.on(h.scope + "/open")
	gen = o.trip()
	res = o.control("disable", outage)
	o.wantTransition("disabling an open breaker", res.Transition, open, disabled, o.next(gen), "disabled by alice: payments outage")
	o.wantDecision("Admit after disabling an open breaker", o.admit("a"), allow, disabled, o.next(gen))
	if s := o.snapshot(); !s.OpenUntil.IsZero() {
		t.Errorf("snapshot %+v; want no OpenUntil", s)
	}
	hs := h.on(h.scope + "/half-open")
	gen = hs.halfOpen("p")
	dis = hs.control("disable", outage).Generation
	hs.wantResult("settling a probe of before disabling", hs.settle("p", ok(gen)), disabled, dis, 1)
	if s := hs.snapshot(); s.ProbesInFlight != 0 {
		t.Errorf("snapshot %+v; want the probe leases dropped", s)
	}
}

func testEnableRestoresNormalRules(t *testing.T, f Factory) {
	h := newHarness(t, f, basePolicy())
	h.controller()
	dis := h.control("disable", outage).Generation
	h.record(fail(dis), fail(dis), fail(dis))
	h.wantDecision("a call in flight when enabling", h.admit("a"), allow, disabled, dis)
	res := h.control("enable", fixed)
	h.wantResult("enabling", res, closed, dis, 0)
	h.wantTransition("enabling", res.Transition, disabled, closed, dis, "enabled by bob: fixed in v1.2.3")
	s := h.wantState("enabled", closed, dis)
	if s.Calls != 3 || s.Operator != (coordinator.Note{}) || !s.ForcedAt.IsZero() {
		t.Errorf("snapshot %+v; want the 3 calls counted while disabled kept, and no note", s)
	}
	h.wantDecision("Admit after enabling", h.admit("b"), allow, closed, dis)
	res = h.record(fail(dis))
	h.wantTransition("the next failure, of a call admitted while disabled", res.Transition, closed, open, h.next(dis), "failures 4/4 >= 50%")

	res = h.control("enable", fixed)
	h.wantResult("enabling an open breaker", res, open, h.next(dis), 0)
	h.wantNoTransition("enabling an open breaker", res.Transition)
	i := h.on(h.scope + "/isolated")
	iso := i.control("isolate", outage).Generation
	res = i.control("enable", fixed)
	i.wantResult("enabling an isolated breaker", res, isolated, iso, 0)
	i.wantNoTransition("enabling an isolated breaker", res.Transition)

	// Enabled, the state is kept a window after the last write, like any
	// closed state.
	e := h.on(h.scope + "/forgotten")
	dis = e.control("disable", outage).Generation
	e.advance(time.Hour)
	e.control("enable", coordinator.Note{})
	e.wantForgottenAt("enabled", e.forgetAt(e.now()), dis)
}

func testManualStatesNeverExpire(t *testing.T, f Factory) {
	h := newHarness(t, f, basePolicy())
	h.controller()
	d := h.on(h.scope + "/disabled")
	iso := h.control("isolate", outage).Generation
	dis := d.control("disable", outage).Generation
	h.advance(10000 * time.Hour)
	if s := h.wantState("a long time after isolating", isolated, iso); s.Operator != outage {
		t.Errorf("snapshot %+v; want the note kept", s)
	}
	if s := d.wantState("a long time after disabling", disabled, dis); s.Operator != outage {
		t.Errorf("snapshot %+v; want the note kept", s)
	}
	h.wantDecision("a long time after isolating", h.admit("a"), reject, isolated, iso)
}

// testManualStatesAreTransitions checks that every transition an operator
// makes goes out on the optional transition feed, as returned, in order,
// including the end of an isolation: published before the command that
// ended it, or reported by the Admit that did.
func testManualStatesAreTransitions(t *testing.T, f Factory) {
	h := newHarness(t, f, basePolicy())
	h.controller()
	ctx, watch := h.watch()
	var want []coordinator.Transition
	add := func(tr *coordinator.Transition) coordinator.Transition {
		t.Helper()
		if tr == nil {
			t.Fatalf("no transition after %d", len(want))
		}
		want = append(want, *tr)
		return *tr
	}
	add(h.control("isolate", outage).Transition)
	add(h.control("release", fixed).Transition)
	add(h.control("disable", outage).Transition)
	h.control("disable", outage) // no transition
	add(h.control("enable", fixed).Transition)
	iso := add(h.control("isolate", coordinator.Note{Reason: "one second", For: time.Second}).Transition)
	h.advance(time.Second)
	add(&coordinator.Transition{Scope: h.scope, From: isolated, To: closed, Generation: h.next(iso.Generation), At: h.now(), Reason: implement.IsolationEnded})
	add(h.control("isolate", coordinator.Note{Reason: "again", For: time.Second}).Transition)
	h.advance(time.Second)
	add(h.admit("a").Transition)
	add(h.control("isolate", outage).Transition)

	wantTransitions(t, ctx, watch, want)
}

// command is one Controller operation with its note.
type command struct {
	op   string
	note coordinator.Note
}

// testNoReplicasNothingToWaitFor: the coordinators Run is given have no
// replicas, so every command, whether it changes the state or not, says
// there was nothing to wait for (see [coordinator.Replication]).
func testNoReplicasNothingToWaitFor(t *testing.T, f Factory) {
	h := newHarness(t, f, basePolicy())
	h.controller()
	for _, c := range []command{
		{"isolate", outage}, {"isolate", fixed}, {"release", fixed}, {"release", fixed},
		{"disable", outage}, {"enable", fixed}, {"enable", fixed},
	} {
		if res := h.control(c.op, c.note); res.Replicas != (coordinator.Replication{}) {
			t.Errorf("%s: Replicas %+v; want zero: nothing to wait for", c.op, res.Replicas)
		}
	}
}

func testInvalidNoteIsAnError(t *testing.T, f Factory) {
	h := newHarness(t, f, basePolicy())
	h.controller()
	for _, c := range []command{
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
		// 0x9b alone is no UTF-8, but a control sequence introducer to an
		// 8-bit terminal; U+009B is the same as a rune.
		{"isolate", coordinator.Note{Reason: "\x9b2J outage"}},
		{"isolate", coordinator.Note{Reason: "outage", By: "\xffalice"}},
		{"release", coordinator.Note{Reason: "fixed \xe2\x82"}},
		{"isolate", coordinator.Note{Reason: "\u009b2J outage"}},
	} {
		_, err := h.controlErr(c.op, c.note)
		if !errors.Is(err, coordinator.ErrInvalidNote) {
			t.Errorf("%s with %+.60v: error %v; want one wrapping coordinator.ErrInvalidNote", c.op, c.note, err)
		}
		var ne *coordinator.NoteError
		if !errors.As(err, &ne) || ne.Field == "" {
			t.Errorf("%s with %+.60v: error %v; want a *NoteError naming the field", c.op, c.note, err)
		}
	}
	bad := basePolicy()
	bad.Buckets = 0
	_, err := h.controller().Isolate(h.t.Context(), coordinator.CommandRequest{Scope: h.scope, Policy: bad, Note: outage})
	if !errors.Is(err, coordinator.ErrInvalidPolicy) {
		t.Errorf("Isolate with Buckets 0: error %v; want one wrapping coordinator.ErrInvalidPolicy", err)
	}
	h.wantNotBorn("after invalid notes and policies, which must change nothing")
}

// testIsolateAgainWithAnotherEnd: isolating an isolated breaker with
// another end is a transition isolated -> isolated in the same generation,
// published, so that replicas that took the old end hear the new one;
// with the same end and another note, nothing moves.
func testIsolateAgainWithAnotherEnd(t *testing.T, f Factory) {
	h := newHarness(t, f, basePolicy())
	h.controller()
	ctx, watch := h.watch()
	first := h.control("isolate", coordinator.Note{By: "alice", Reason: "migration", For: time.Hour})
	iso := first.Generation
	h.advance(time.Second)
	res := h.control("isolate", coordinator.Note{By: "alice", Reason: "migration, almost done", For: time.Minute})
	end := h.now().Add(time.Minute)
	if tr := res.Transition; tr == nil || tr.From != isolated || tr.To != isolated || tr.Generation != iso ||
		!tr.OpenUntil.Equal(end) || tr.Reason != "isolated by alice for 1m0s: migration, almost done" {
		t.Errorf("isolating again for 1m: %+v; want isolated -> isolated in generation %d until %v", res, iso, end)
	}
	if res.State != isolated || res.Generation != iso || res.RetryAfter != time.Minute {
		t.Errorf("isolating again for 1m: %+v; want isolated in %d for 1m", res, iso)
	}
	res = h.control("isolate", coordinator.Note{By: "bob", Reason: "same end, another note", For: time.Minute})
	h.wantNoTransition("isolating again with the same end", res.Transition)
	if s := h.snapshot(); s.Operator.By != "bob" || !s.OpenUntil.Equal(end) {
		t.Errorf("snapshot %+v; want bob's note, the end unchanged", s)
	}
	tr := coordinator.Transition{Scope: h.scope, From: isolated, To: isolated, Generation: iso, At: end.Add(-time.Minute),
		Reason: "isolated by alice for 1m0s: migration, almost done", OpenUntil: end}
	wantTransitions(t, ctx, watch, []coordinator.Transition{*first.Transition, tr})
}
