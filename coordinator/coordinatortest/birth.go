package coordinatortest

import (
	"testing"
	"time"

	"github.com/cbgrpc/cbgrpc/coordinator"
)

// Birth, by rule 4 of the contract (docs/architecture.md): a scope that is not born
// (never used, forgotten, or whose state record was lost) is born by the
// first operation that writes, closed, in a new generation, which it
// persists, with nothing of an earlier life. Snapshot never writes: it
// reads such a scope as coordinator.Snapshot{Scope}.

// testEveryWriteGivesBirth runs each operation but Snapshot on a scope
// never used: it is born in NextGeneration(0, now), then the operation
// does its own work (Isolate and Disable mint one more), and a Snapshot a
// millisecond later reads what the operation left.
func testEveryWriteGivesBirth(t *testing.T, f Factory) {
	for _, w := range []struct {
		op    string
		do    func(h *harness) coordinator.Result
		state coordinator.State
		mints bool // the operation mints a generation of its own after the birth
		stale int
	}{
		{"Admit", func(h *harness) coordinator.Result { return asResult(h.admit("a")) }, closed, false, 0},
		{"Record", func(h *harness) coordinator.Result { return h.record(fail(0), ok(0)) }, closed, false, 2},
		{"Settle", func(h *harness) coordinator.Result { return h.settle("a", ok(0)) }, closed, false, 1},
		{"Isolate", func(h *harness) coordinator.Result { return h.control("isolate", outage) }, isolated, true, 0},
		{"Release", func(h *harness) coordinator.Result { return h.control("release", fixed) }, closed, false, 0},
		{"Disable", func(h *harness) coordinator.Result { return h.control("disable", outage) }, disabled, true, 0},
		{"Enable", func(h *harness) coordinator.Result { return h.control("enable", fixed) }, closed, false, 0},
	} {
		t.Run(w.op, func(t *testing.T) {
			h := newHarness(t, f, basePolicy())
			want := h.next(0)
			if w.mints {
				want = h.next(want)
			}
			res := w.do(h)
			h.wantResult(w.op+" of a scope never used", res, w.state, want, w.stale)
			if !w.mints {
				h.wantNoTransition(w.op+" of a scope never used", res.Transition)
			}
			h.advance(time.Millisecond)
			h.wantState("a millisecond later", w.state, want)
		})
	}
}

func testBirthPersistsTheGeneration(t *testing.T, f Factory) {
	h := newHarness(t, f, basePolicy())
	born := h.admit("a")
	h.wantDecision("the birth", born, allow, closed, h.next(0))
	// A generation minted now would differ from the birth's.
	h.advance(time.Millisecond)
	h.wantDecision("a millisecond later", h.admit("b"), allow, closed, born.Generation)
	h.advance(5 * time.Millisecond)
	h.wantResult("the first call's outcome", h.record(ok(born.Generation)), closed, born.Generation, 0)
}

func testSnapshotNeverGivesBirth(t *testing.T, f Factory) {
	h := newHarness(t, f, basePolicy())
	for range 3 {
		h.wantNotBorn("looking at a scope never used")
		h.advance(time.Millisecond)
	}
	// Had a Snapshot given birth, this would answer in its millisecond.
	gen := h.closedGen()
	if gen != h.next(0) {
		t.Errorf("the first write: generation %d; want %d, minted by the write", gen, h.next(0))
	}
	h.forget(h.now())
	for range 3 {
		h.wantNotBorn("looking at a forgotten scope")
		h.advance(time.Millisecond)
	}
	h.wantDecision("the first write after forgetting", h.admit("b"), allow, closed, h.next(gen))
}

// testBirthForgetsBatchIDs: a scope born again remembers no batch ID of
// its earlier life, so a batch of the new generation is counted whatever
// its ID.
func testBirthForgetsBatchIDs(t *testing.T, f Factory) {
	h := newHarness(t, f, basePolicy())
	gen := h.closedGen()
	h.wantResult("batch-1", h.recordBatch("batch-1", ok(gen)), closed, gen, 0)
	h.forget(h.now())
	gen = h.closedGen()
	h.wantResult("batch-1 again, after the scope was born again", h.recordBatch("batch-1", ok(gen)), closed, gen, 0)
	if s := h.snapshot(); s.Calls != 1 {
		t.Errorf("snapshot %+v; want the batch counted", s)
	}
}

// testRecordOnNotBornScopeBirthsAndIsStale: outcomes and settlements a
// scope never handed out a generation for are stale, in the generation
// their operation gives birth to; a value no coordinator hands out (above
// implement.MaxGeneration) does not move that generation.
func testRecordOnNotBornScopeBirthsAndIsStale(t *testing.T, f Factory) {
	h := newHarness(t, f, basePolicy())
	res := h.record(fail(0), fail(1), fail(1<<40), fail(^uint64(0)))
	born := h.next(0)
	h.wantResult("outcomes of generations the scope never handed out", res, closed, born, 4)
	h.wantNoTransition("outcomes of generations the scope never handed out", res.Transition)
	h.advance(time.Millisecond)
	if s := h.wantState("a millisecond later", closed, born); s.Calls != 0 {
		t.Errorf("snapshot %+v; want nothing counted", s)
	}
	h.wantResult("a probe the scope never admitted", h.settle("ghost", fail(born)), closed, born, 1)
}
