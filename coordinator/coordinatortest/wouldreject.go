package coordinatortest

import (
	"testing"

	"github.com/cbgrpc/cbgrpc/coordinator"
)

// A dry-run replica (cbgrpc.WithDryRun) lets through the calls it would
// have rejected and reports them (Outcome.WouldReject): no calls, never
// stale, counted in Snapshot.WouldReject when they carry the current
// generation, whatever the state, and 0 again in each new generation.

func wouldReject(gen uint64) coordinator.Outcome {
	return coordinator.Outcome{Generation: gen, WouldReject: true}
}

// wantWouldReject checks the snapshot's count of would-be rejections.
func (h *harness) wantWouldReject(what string, n int) {
	h.t.Helper()
	if s := h.snapshot(); s.WouldReject != n {
		h.t.Errorf("%s: %s would reject %d; want %d", what, showSnapshot(s), s.WouldReject, n)
	}
}

// testWouldRejectCountedApartFromCalls: would-be rejections count in their
// generation in every state, are neither calls nor stale, change nothing
// the rules read, and start again at 0 with each generation.
func testWouldRejectCountedApartFromCalls(t *testing.T, f Factory) {
	p := basePolicy()
	h := newHarness(t, f, p)
	gen := h.closedGen()

	// Closed: beside calls (a ramp or the throttle of a dry run).
	r := h.record(ok(gen), wouldReject(gen), wouldReject(gen), ok(gen))
	h.wantResult("successes and would-be rejections", r, closed, gen, 0)
	h.wantWindow("successes and would-be rejections", r, 2, 0, 0)
	h.wantWouldReject("two would-be rejections while closed", 2)
	// Another generation's are not counted, nor stale.
	h.wantResult("an older generation's", h.record(wouldReject(gen-1)), closed, gen, 0)
	h.wantWouldReject("an older generation's", 2)
	// A batch the coordinator remembers counting is not counted again.
	h.recordBatch("dry-1", ok(gen), wouldReject(gen))
	h.recordBatch("dry-1", ok(gen), wouldReject(gen))
	h.wantWouldReject("a retried batch", 3)

	// Open, by the calls of enforcing replicas: the generation starts at
	// 0 and counts what dry-run replicas let through.
	open := h.trip()
	h.wantWouldReject("after the trip", 0)
	h.wantResult("would-be rejections while open", h.record(wouldReject(open), wouldReject(open), wouldReject(open)), coordinator.StateOpen, open, 0)
	h.wantWouldReject("while open", 3)
	// Half-open keeps the generation, and its count.
	h.waitOpenPeriod()
	if d := h.admit("probe"); d.Verdict != coordinator.Probe {
		t.Fatalf("the probe: %+v", d)
	}
	h.record(wouldReject(open))
	h.wantWouldReject("half-open, in the open generation", 4)
	// Closed again: a new generation, counted from 0.
	h.recover()
	h.wantWouldReject("closed again", 0)
}
