package coordinatortest

import (
	"testing"
	"time"

	"github.com/cbgrpc/cbgrpc/coordinator"
	"github.com/cbgrpc/cbgrpc/coordinator/implement"
)

// Rule 4 (docs/architecture.md), lost state (the Seen field of every request): a write from a caller that
// has seen a generation above the stored one proves that the coordinator
// lost state it had acknowledged (a failover that rolled its data back).
// The scope is born again above what the caller saw: nothing stored
// survives, nothing minted before is handed out again, and outcomes of the
// lost generations are stale. These tests make a caller claim a generation
// the coordinator never minted, which is what a rolled-back store looks
// like from outside.

// testSeenAboveStoredGivesBirth: a closed scope with outcomes counted, and
// an admission from a caller that saw a later generation.
func testSeenAboveStoredGivesBirth(t *testing.T, f Factory) {
	h := newHarness(t, f, basePolicy())
	gen := h.closedGen()
	h.record(fail(gen), ok(gen))
	seen := gen + 5
	h.advance(3 * time.Millisecond)
	d := h.admitSeen(seen, "after a rollback")
	h.wantDecision("admitted by a caller that saw a later generation", d, allow, closed, h.next(seen))
	h.wantNoTransition("a birth", d.Transition)
	if s := h.wantState("born again", closed, h.next(seen)); s.Calls != 0 || s.Failures != 0 || s.ConsecutiveFailures != 0 {
		t.Errorf("snapshot %+v; want nothing counted after the birth", s)
	}
	res := h.record(fail(gen), fail(gen), fail(gen), fail(gen))
	h.wantResult("outcomes of the generation before the loss", res, closed, d.Generation, 4)
}

// testSeenAboveOpenStateGivesBirth: the store rolled back to an open
// period older than what the caller saw; what came after it is lost, and
// lost state reads as not born: the scope is born closed.
func testSeenAboveOpenStateGivesBirth(t *testing.T, f Factory) {
	h := newHarness(t, f, basePolicy())
	gen := h.trip()
	h.wantRejected("open", h.admit("before"), open, gen, h.p.OpenFor)
	d := h.admitSeen(gen+2, "after a rollback")
	h.wantDecision("admitted by a caller that saw a later generation", d, allow, closed, h.next(gen+2))
	if s := h.snapshot(); s.OpenUntil != (time.Time{}) || s.OpenedAt != (time.Time{}) {
		t.Errorf("snapshot %+v; want no open period after the birth", s)
	}
}

// testOutcomeAboveStoredGivesBirthAndIsStale: outcomes carry the
// generation they were admitted under, which the coordinator minted; one
// above the stored generation is proof of a loss, without a Seen field.
func testOutcomeAboveStoredGivesBirthAndIsStale(t *testing.T, f Factory) {
	h := newHarness(t, f, basePolicy())
	gen := h.closedGen()
	h.record(ok(gen))
	res := h.record(fail(gen+1), fail(gen+1), fail(gen+1), fail(gen+1))
	h.wantResult("outcomes of a generation the coordinator lost", res, closed, h.next(gen+1), 4)
	h.wantNoTransition("outcomes of a generation the coordinator lost", res.Transition)
	if s := h.snapshot(); s.Calls != 0 {
		t.Errorf("snapshot %+v; want nothing counted", s)
	}
}

// testProbeAboveStoredGivesBirthAndIsStale: a probe settled with a
// generation above the half-open one, or by a caller that saw one (the
// request's Seen); the half-open period and its leases are lost with the
// rest.
func testProbeAboveStoredGivesBirthAndIsStale(t *testing.T, f Factory) {
	h := newHarness(t, f, basePolicy())
	for _, c := range []struct {
		what         string
		ahead, above uint64 // the probe's generation and Seen, above the half-open one
	}{
		{"probe of a generation the coordinator lost", 1, 0},
		{"probe settled by a caller that saw a later generation", 0, 3},
	} {
		h := h.on(c.what)
		gen := h.halfOpen("a")
		q := coordinator.SettleRequest{Scope: h.scope, Policy: h.p, Claim: "a", Outcome: ok(gen + c.ahead)}
		if c.above != 0 {
			q.Seen = gen + c.above
		}
		res, err := h.c.Settle(t.Context(), q)
		if err != nil {
			t.Fatal(err)
		}
		lost := max(gen+c.ahead, q.Seen)
		h.wantResult(c.what, res, closed, h.next(lost), 1)
		h.wantNoTransition(c.what, res.Transition)
		if s := h.snapshot(); s.ProbesInFlight != 0 || s.ProbeSuccesses != 0 {
			t.Errorf("%s: snapshot %+v; want no probe left after the birth", c.what, s)
		}
	}
}

// testSeenOnNotBornScope: a scope forgotten after a window (or never
// used) is born above both its floor and what the caller saw; so is a
// command of an operator.
func testSeenOnNotBornScope(t *testing.T, f Factory) {
	h := newHarness(t, f, basePolicy())
	gen := h.closedGen()
	h.forget(h.now())
	h.wantNotBorn("a window later")
	seen := h.next(gen) + 7 // above what a birth at this time would mint
	d := h.admitSeen(seen, "a")
	h.wantDecision("born by a caller that saw a later generation", d, allow, closed, h.next(seen))

	if _, ok := h.c.(coordinator.Controller); !ok {
		return
	}
	h = h.on("seen-then-isolated")
	seen = h.next(0) + 3
	res, err := h.controller().Isolate(t.Context(), coordinator.CommandRequest{Scope: h.scope, Policy: h.p, Note: coordinator.Note{By: "alice", Reason: "rolled back"}, Seen: seen})
	if err != nil {
		t.Fatal(err)
	}
	if res.State != isolated || res.Generation <= seen {
		t.Errorf("isolating a scope never written, by a caller that saw generation %d: %+v; want isolated above it", seen, res)
	}
}

// testSeenAtOrBelowStoredChangesNothing: the generation the caller saw, or
// an older one, is no news; nor is 0, and looking never gives birth.
func testSeenAtOrBelowStoredChangesNothing(t *testing.T, f Factory) {
	h := newHarness(t, f, basePolicy())
	gen := h.closedGen()
	h.record(fail(gen))
	for _, seen := range []uint64{0, gen - 1, gen} {
		d := h.admitSeen(seen, "same")
		h.wantDecision("seen at or below the stored generation", d, allow, closed, gen)
	}
	if s := h.wantState("unchanged", closed, gen); s.Failures != 1 {
		t.Errorf("snapshot %+v; want the failure still counted", s)
	}
	tripped := h.trip()
	h.wantRejected("open, seen the closed generation", h.admitSeen(gen, "x"), open, tripped, h.p.OpenFor)
}

// testSeenOnRecordGivesBirth: Record honours its request's Seen, not only
// the generations of its outcomes: outcomes of the generation the store
// rolled back to are stale once the caller says it saw a later one.
func testSeenOnRecordGivesBirth(t *testing.T, f Factory) {
	h := newHarness(t, f, basePolicy())
	gen := h.closedGen()
	seen := gen + 5
	h.advance(3 * time.Millisecond)
	res := h.send(coordinator.RecordRequest{Outcomes: []coordinator.Outcome{fail(gen), fail(gen)}, Seen: seen})
	h.wantResult("a Record from a caller that saw a later generation", res, closed, h.next(seen), 2)
	h.wantNoTransition("a birth", res.Transition)
	if s := h.wantState("born again", closed, h.next(seen)); s.Calls != 0 {
		t.Errorf("snapshot %+v; want nothing counted", s)
	}
}

// testSeenOnPushGivesBirth: Push honours its request's Seen: the
// generation the pushed-back call was admitted under is of the lost
// state, so the push is stale in the scope born above what was seen.
func testSeenOnPushGivesBirth(t *testing.T, f Factory) {
	h := newHarness(t, f, basePolicy())
	p := h.pusher()
	gen := h.closedGen()
	seen := gen + 4
	res, err := p.Push(t.Context(), coordinator.PushRequest{Scope: h.scope, Policy: h.p, Generation: gen, Period: time.Second, Reason: "server pushback", Seen: seen})
	if err != nil {
		t.Fatal(err)
	}
	h.wantResult("a push from a caller that saw a later generation", res, closed, h.next(seen), 1)
	h.wantNoTransition("a stale push", res.Transition)
}

// testSeenFromTheFutureCountsForNothing: a generation a caller claims to
// have seen further ahead of the coordinator's clock than
// implement.SeenAhead was never handed out (a forged message, junk): it
// gives no birth, as a Seen or as an outcome's generation, even just
// below the top of the range a double holds, and the generations minted
// after it still follow NextGeneration.
func testSeenFromTheFutureCountsForNothing(t *testing.T, f Factory) {
	p := basePolicy()
	p.ConsecutiveFailures = 1
	h := newHarness(t, f, p)
	gen := h.closedGen()
	far := implement.NextGeneration(0, h.now().Add(implement.SeenAhead+time.Second))
	for _, seen := range []uint64{far, implement.MaxGeneration - 1} {
		h.wantDecision("admitted by a caller that saw a generation from the future", h.admitSeen(seen, "future"), allow, closed, gen)
		res := h.record(coordinator.Outcome{Generation: seen, Failure: true})
		h.wantResult("an outcome of a generation from the future", res, closed, gen, 1)
	}
	for range 4 {
		h.advance(time.Millisecond)
		gen = h.wantTrip("a failure", gen, "consecutive failures 1 >= 1", fail(gen))
		h.waitOpenPeriod()
		h.admit("probe-1")
		h.settle("probe-1", ok(gen))
		h.admit("probe-2")
		res := h.settle("probe-2", ok(gen))
		h.wantResult("the second probe", res, closed, h.next(gen), 0)
		gen = res.Generation
	}
}
