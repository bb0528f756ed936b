package coordinatortest

import (
	"testing"
	"time"

	"github.com/cbgrpc/cbgrpc/coordinator"
)

// A Record that counted outcomes and left the breaker closed or disabled
// answers with the window's counts after it (Result.Calls, Failures,
// Slow), the same a Snapshot would give: a replica learns how far its
// scope is from tripping without asking again, and paces its reports by
// it. Any other Record answers zeros.

func testRecordAnswersTheWindowCounts(t *testing.T, f Factory) {
	p := basePolicy()
	p.MinCalls, p.SlowCallDuration, p.SlowCallRatio = 100, time.Second, 0.9
	h := newHarness(t, f, p)
	gen := h.closedGen()
	wantCounts := func(what string, r coordinator.Result, calls, failures, slow int) {
		t.Helper()
		if r.Calls != calls || r.Failures != failures || r.Slow != slow {
			t.Errorf("%s: counts %d/%d/%d (calls/failures/slow); want %d/%d/%d", what, r.Calls, r.Failures, r.Slow, calls, failures, slow)
		}
		if calls == 0 {
			return
		}
		if s := h.snapshot(); s.Calls != r.Calls || s.Failures != r.Failures || s.Slow != r.Slow {
			t.Errorf("%s: the answer's counts %d/%d/%d differ from the snapshot's %d/%d/%d", what, r.Calls, r.Failures, r.Slow, s.Calls, s.Failures, s.Slow)
		}
	}

	wantCounts("the first Record", h.record(ok(gen), fail(gen), took(gen, 2*time.Second)), 3, 1, 1)
	h.advance(300 * time.Millisecond)
	wantCounts("a Record three buckets later", h.record(ok(gen), fail(gen)), 5, 2, 1)
	// The first bucket leaves the window: its outcomes leave the counts.
	h.advance(800 * time.Millisecond)
	wantCounts("once the first bucket has left the window", h.record(ok(gen)), 3, 1, 0)

	wantCounts("a batch", h.recordBatch("batch-1", ok(gen)), 4, 1, 0)
	wantCounts("the same batch again, all stale", h.recordBatch("batch-1", ok(gen)), 0, 0, 0)
	wantCounts("outcomes of another generation, all stale", h.record(ok(gen-1)), 0, 0, 0)
	// A Record that counts nothing once buckets have left the window
	// leaves the counts as they were: the next one subtracts the buckets.
	h.advance(500 * time.Millisecond)
	wantCounts("half a window on", h.record(fail(gen)), 3, 1, 0)
	h.advance(600 * time.Millisecond)
	wantCounts("a stale Record after two buckets left", h.record(ok(gen-1)), 0, 0, 0)
	wantCounts("the next Record", h.record(ok(gen)), 2, 1, 0)

	hd := h.on(h.scope + "/disabled")
	hd.control("disable", coordinator.Note{Reason: "counting only"})
	dgen := hd.snapshot().Generation
	if r := hd.record(fail(dgen), fail(dgen)); r.Calls != 2 || r.Failures != 2 {
		t.Errorf("a Record while disabled: counts %d/%d; want 2/2", r.Calls, r.Failures)
	}

	ht := h.on(h.scope + "/trips")
	ht.p.MinCalls = 2
	tgen := ht.closedGen()
	if r := ht.record(fail(tgen), fail(tgen)); r.State != open || r.Calls != 0 || r.Failures != 0 {
		t.Errorf("a Record that trips: %+v; want open and no counts (the trip carries them)", r)
	}
	if r := ht.record(ok(ht.snapshot().Generation)); r.Calls != 0 {
		t.Errorf("a Record while open: %+v; want no counts", r)
	}
}
