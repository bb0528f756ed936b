package coordinatortest

import (
	"fmt"
	"testing"
	"time"

	"github.com/cbgrpc/cbgrpc/coordinator"
)

// The window's layout (Policy.Window and Policy.Buckets: the width of a
// bucket and how many there are) may change under a scope: an operator's
// override, or a rollout of a new policy. The window keeps the layout it
// was written with. A Record under another layout that counts outcomes
// first re-lays the window by time: the counts of each bucket live under
// the old layout (calls, failures, slow calls, throttled requests) go to
// the bucket of the new one that holds the old bucket's last millisecond
// (or now), so that nothing is counted twice and counts keep their age,
// leaving the window when the new layout says, even while layouts
// alternate; counts wholly before the new window have left it. The
// generation and the run of failures stay. A Snapshot reads the window
// with the layout it was written with, whatever policy the reader passes.

// layoutPolicy counts without tripping: the trip has a test of its own.
func layoutPolicy(window time.Duration, buckets int) coordinator.Policy {
	p := basePolicy()
	p.Window, p.Buckets, p.MinCalls = window, buckets, 1000
	return p
}

// withLayout returns a harness on the same scope that passes the policy
// with another window and bucket count.
func (h *harness) withLayout(window time.Duration, buckets int) *harness {
	o := h.on(h.scope)
	o.p.Window, o.p.Buckets = window, buckets
	return o
}

// wantCounts checks a snapshot's window counts, calls/failures/throttled.
func (h *harness) wantCounts(what string, calls, failures, throttledN int) coordinator.Snapshot {
	h.t.Helper()
	s := h.snapshot()
	if s.Calls != calls || s.Failures != failures || s.Throttled != throttledN {
		h.t.Errorf("%s: snapshot %s; want %d calls, %d failures, %d throttled", what, showSnapshot(s), calls, failures, throttledN)
	}
	return s
}

// testLayoutGrowingKeepsTheCounts: a wider bucket (a longer window) keeps
// every count, the generation and the run of failures.
func testLayoutGrowingKeepsTheCounts(t *testing.T, f Factory) {
	h := newHarness(t, f, layoutPolicy(time.Second, 10)) // buckets of 100ms
	gen := h.closedGen()
	h.record(ok(gen), fail(gen), throttled(gen))
	h.advance(300 * time.Millisecond)
	h.wantWindow("under the first layout", h.record(ok(gen), fail(gen)), 4, 2, 1)

	wide := h.withLayout(3*time.Second, 6) // buckets of 500ms
	wide.advance(100 * time.Millisecond)
	r := wide.record(fail(gen))
	wide.wantResult("the first Record under a longer window", r, closed, gen, 0)
	wide.wantWindow("the first Record under a longer window", r, 5, 3, 1)
	if s := wide.snapshot(); s.ConsecutiveFailures != 2 {
		t.Errorf("after the re-lay: %s; want the run of 2 failures kept", showSnapshot(s))
	}
	h.wantCounts("a Snapshot under the first policy, which reads the stored layout", 5, 3, 1)
}

// testLayoutShrinkingKeepsWhatTheNewWindowHolds: under a narrower bucket
// (a shorter window), the counts of old buckets that end within the new
// window are kept, in the bucket that holds their old bucket's end (or
// now); those wholly before it have left the new window; and the kept
// ones leave when the new layout says.
func testLayoutShrinkingKeepsWhatTheNewWindowHolds(t *testing.T, f Factory) {
	h := newHarness(t, f, layoutPolicy(3*time.Second, 6)) // buckets of 500ms
	gen := h.closedGen()
	start := h.now()
	at := func(d time.Duration) { h.clock.Set(start.Add(d)) }
	h.record(ok(gen), fail(gen)) // old bucket 0, ends at 499ms
	at(1200 * time.Millisecond)
	h.record(ok(gen), throttled(gen)) // old bucket 2, ends at 1499ms
	at(2200 * time.Millisecond)
	h.record(ok(gen), fail(gen)) // old bucket 4, ends at 2499ms
	at(2600 * time.Millisecond)
	h.wantWindow("under the first layout", h.record(fail(gen)), 6, 3, 1) // old bucket 5

	// At 2.7s a window of 1s holds 1.8s to 2.7s: old buckets 4 and 5.
	narrow := h.withLayout(time.Second, 10) // buckets of 100ms
	at(2700 * time.Millisecond)
	r := narrow.record(ok(gen))
	narrow.wantResult("the first Record under a shorter window", r, closed, gen, 0)
	narrow.wantWindow("the first Record under a shorter window", r, 4, 2, 0)
	h.wantCounts("a Snapshot under the first policy, which reads the stored layout", 4, 2, 0)
	// Old bucket 4 went to the bucket of 2.4s: it leaves at 3.4s.
	at(3400*time.Millisecond - time.Millisecond)
	narrow.wantCounts("1ms before the re-laid bucket 4 leaves the new window", 4, 2, 0)
	at(3400 * time.Millisecond)
	narrow.wantCounts("as it leaves", 2, 1, 0)
}

// testReLaidCountsKeepTheirAge: re-laid counts go to the bucket of the
// new layout that holds their old bucket's end, and leave the window when
// the new layout says; counts of later buckets stay. Only what was live
// under the old layout is re-laid.
func testReLaidCountsKeepTheirAge(t *testing.T, f Factory) {
	h := newHarness(t, f, layoutPolicy(time.Second, 10)) // buckets of 100ms
	gen := h.closedGen()
	start := h.now()
	at := func(d time.Duration) { h.clock.Set(start.Add(d)) }
	h.record(fail(gen), fail(gen), throttled(gen)) // bucket 0
	at(900 * time.Millisecond)
	h.record(ok(gen), ok(gen)) // bucket 9, ends at 999ms
	// At 1s, bucket 0 has left the first window: two calls are live.
	wide := h.withLayout(2*time.Second, 4) // buckets of 500ms
	at(time.Second)
	wide.wantWindow("the re-lay, a window after the first bucket", wide.record(ok(gen)), 3, 0, 0)
	at(1700 * time.Millisecond)
	wide.wantWindow("a bucket of the new layout later", wide.record(fail(gen)), 4, 1, 0)

	// Bucket 9 went to the new bucket of 500ms to 1s, which leaves at
	// 2.5s; the call of 1s leaves at 3s, the failure of 1.7s at 3.5s.
	for _, c := range []struct {
		at              time.Duration
		calls, failures int
	}{
		{2500*time.Millisecond - time.Millisecond, 4, 1},
		{2500 * time.Millisecond, 2, 1},
		{3 * time.Second, 1, 1},
	} {
		at(c.at)
		wide.wantCounts(fmt.Sprintf("at %v", c.at), c.calls, c.failures, 0)
	}
	wide.wantForgottenAt("the scope", wide.forgetAt(start.Add(1700*time.Millisecond)), gen)
}

// testAlternatingLayoutsLetCountsLeave: while replicas of two layouts
// record in turn, every Record re-lays the window, and counts still leave
// it with their age: failures of long ago stop counting.
func testAlternatingLayoutsLetCountsLeave(t *testing.T, f Factory) {
	a := newHarness(t, f, layoutPolicy(time.Second, 10)) // buckets of 100ms
	b := a.withLayout(2*time.Second, 4)                  // buckets of 500ms
	gen := a.closedGen()
	a.record(fail(gen), fail(gen), fail(gen))
	for i := range 30 {
		a.advance(100 * time.Millisecond)
		w := a
		if i%2 == 1 {
			w = b
		}
		w.record(ok(gen))
	}
	// 3s later: the failures are two windows of either layout old.
	for name, w := range map[string]*harness{"the first": a, "the second": b} {
		s := w.snapshot()
		if s.Failures != 0 || s.Calls > 25 {
			t.Errorf("after 3s of alternating layouts, a Snapshot under %s: %s; want the failures gone and at most 2.5s of calls",
				name, showSnapshot(s))
		}
	}
}

// testSnapshotReadsTheStoredLayout: a reader that passes another policy
// (an operator's tool, a replica not yet on the new policy) reads the
// counts with the layout the window was written with, and changes
// nothing.
func testSnapshotReadsTheStoredLayout(t *testing.T, f Factory) {
	h := newHarness(t, f, layoutPolicy(time.Second, 10)) // buckets of 100ms
	gen := h.closedGen()
	h.record(ok(gen), throttled(gen))
	h.advance(500 * time.Millisecond)
	h.record(ok(gen), fail(gen))

	reader := h.withLayout(10*time.Second, 5) // buckets of 2s
	reader.wantCounts("a reader with a longer window", 3, 1, 1)
	h.advance(500 * time.Millisecond)
	reader.wantCounts("once the first bucket has left the stored window", 2, 1, 0)
	short := h.withLayout(200*time.Millisecond, 2)
	short.wantCounts("a reader with a shorter window", 2, 1, 0)
	h.advance(499 * time.Millisecond)
	reader.wantCounts("the last millisecond of the second bucket", 2, 1, 0)
	h.wantWindow("the writer's next Record", h.record(ok(gen)), 3, 1, 0)
}

// testAlternatingLayoutsNeverCountTwice: replicas of two or three
// policies record in turn; every outcome is counted once, whatever the
// order, and the counts answered are the outcomes counted.
func testAlternatingLayoutsNeverCountTwice(t *testing.T, f Factory) {
	h := newHarness(t, f, layoutPolicy(time.Second, 10))
	gen := h.closedGen()
	layouts := map[rune]*harness{
		'A': h,
		'B': h.withLayout(3*time.Second, 6),
		'C': h.withLayout(600*time.Millisecond, 4),
	}
	calls, failures := 0, 0
	// Runs of one layout stay well within its window: nothing leaves.
	for i, l := range "ABBCAACBBACCABCABBCAACBACBBACA" {
		w := layouts[l]
		w.advance(time.Duration(10+i*37%90) * time.Millisecond)
		outcomes := []coordinator.Outcome{ok(gen)}
		if i%3 == 0 {
			outcomes = append(outcomes, fail(gen))
			failures++
		}
		calls += len(outcomes)
		r := w.record(outcomes...)
		if r.Calls != calls || r.Failures != failures || r.Stale != 0 {
			t.Fatalf("Record %d, under layout %c: %s; want %d calls and %d failures, every outcome counted once",
				i, l, showResult(r), calls, failures)
		}
		for name, o := range layouts {
			if s := o.snapshot(); s.Calls != calls || s.Failures != failures {
				t.Fatalf("Record %d, under layout %c: a Snapshot under layout %c: %s; want %d calls and %d failures",
					i, l, name, showSnapshot(s), calls, failures)
			}
		}
	}
}

// testTripOnReLaidCounts: the rules read the re-laid counts: the Record
// that re-lays trips when its outcomes, added to them, make a rule hold.
func testTripOnReLaidCounts(t *testing.T, f Factory) {
	h := newHarness(t, f, basePolicy()) // four calls at 50 % trip
	gen := h.closedGen()
	h.wantNoTrip("three calls, two failures", gen, fail(gen), ok(gen), fail(gen))
	wide := h.withLayout(2*time.Second, 4)
	wide.advance(200 * time.Millisecond)
	wide.wantTrip("the fourth call, under another layout", gen, "failures 2/4 >= 50%", ok(gen))
	if tr := wide.snapshot().LastTrip; tr.Calls != 4 || tr.Failures != 2 {
		t.Errorf("the last trip: %+v; want 4 calls and 2 failures, the re-laid counts and the new call", tr)
	}
}
