package coordinatortest

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/cbgrpc/cbgrpc/coordinator"
)

// The window's layout (Policy.Window and Policy.Buckets: the width of a
// bucket and how many there are) may change under a scope: an operator's
// override, or a rollout of a new policy. The window keeps the layout it
// was written with, and the start of the last bucket a Record of that
// layout counted in. While that lies within a window of that layout, its
// replicas still record: a Record of another layout counts into the window's buckets, in
// the window's layout, so that counts keep their age exactly while
// replicas of two layouts record in turn. Once none did, the first Record
// of another layout that counts outcomes re-lays the window into its own
// layout: the counts of each bucket live under the old layout (calls,
// failures, slow calls, throttled requests) go to the bucket of the new
// one that holds the old bucket's first millisecond, so that nothing is
// counted twice and no count moves later than it was counted (it may
// leave up to a bucket early, once per change of layout); counts whose
// bucket starts before the new window have left it. The generation and
// the run of failures stay. A Snapshot reads the window with the layout
// it was written with, whatever policy the reader passes.

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

// testLayoutStaysWhileItsReplicasRecord: a Record of another layout,
// while a Record of the window's own counted within a window of it, counts
// into the window's buckets: every count, the generation and the run of
// failures stay, and the counts leave when the window's layout says.
func testLayoutStaysWhileItsReplicasRecord(t *testing.T, f Factory) {
	h := newHarness(t, f, layoutPolicy(time.Second, 10)) // buckets of 100ms
	gen := h.closedGen()
	start := h.now()
	at := func(d time.Duration) { h.clock.Set(start.Add(d)) }
	h.record(ok(gen), fail(gen), throttled(gen))
	at(300 * time.Millisecond)
	h.wantWindow("under the first layout", h.record(ok(gen), fail(gen)), 4, 2, 1)

	wide := h.withLayout(3*time.Second, 6) // buckets of 500ms
	at(400 * time.Millisecond)
	wide.wantKept("a Record under a longer window", h, wide.record(fail(gen)), gen, countsAt{calls: 5, failures: 3, throttledN: 1}, 2)
	// In the first layout, the first bucket leaves at 1s, the one of
	// 300ms at 1.3s, the other layout's failure at 1.4s.
	wide.wantCountsAt(start, []countsAt{
		{time.Second - time.Millisecond, 5, 3, 1},
		{time.Second, 3, 2, 0},
		{1400 * time.Millisecond, 0, 0, 0},
	})
}

// countsAt is the window's counts at a time from a test's start.
type countsAt struct {
	at                          time.Duration
	calls, failures, throttledN int
}

// wantKept checks r, the answer to a Record under h's layout, and a
// Snapshot under first's after it: closed in generation gen, nothing
// stale, the window's counts want and the run of failures run kept.
func (h *harness) wantKept(what string, first *harness, r coordinator.Result, gen uint64, want countsAt, run int) {
	h.t.Helper()
	h.wantResult(what, r, closed, gen, 0)
	h.wantWindow(what, r, want.calls, want.failures, want.throttledN)
	if s := h.snapshot(); s.ConsecutiveFailures != run {
		h.t.Errorf("%s: %s; want the run of %d failures kept", what, showSnapshot(s), run)
	}
	first.wantCounts(what+", read under the first policy", want.calls, want.failures, want.throttledN)
}

// wantCountsAt sets the clock to each time of want after start, in order,
// and checks the counts then.
func (h *harness) wantCountsAt(start time.Time, want []countsAt) {
	h.t.Helper()
	for _, c := range want {
		h.clock.Set(start.Add(c.at))
		h.wantCounts(fmt.Sprintf("at +%v", c.at), c.calls, c.failures, c.throttledN)
	}
}

// testLayoutTakesOverOnceItsReplicasAreGone: once no Record of the
// window's layout has counted for a window of it, the first Record of
// another layout re-lays the window into its own: each live bucket's
// counts go to the new bucket that holds the old bucket's first
// millisecond, and leave when the new layout says.
func testLayoutTakesOverOnceItsReplicasAreGone(t *testing.T, f Factory) {
	h := newHarness(t, f, layoutPolicy(time.Second, 10)) // buckets of 100ms
	gen := h.closedGen()
	start := h.now()
	at := func(d time.Duration) { h.clock.Set(start.Add(d)) }
	h.record(ok(gen), fail(gen), throttled(gen))
	at(300 * time.Millisecond)
	h.record(ok(gen), fail(gen))           // the first layout's last Record
	wide := h.withLayout(2*time.Second, 4) // buckets of 500ms
	at(400 * time.Millisecond)
	wide.record(fail(gen), throttled(gen)) // into the first layout's bucket of 400ms
	at(900 * time.Millisecond)
	wide.record(fail(gen)) // and of 900ms
	at(1299 * time.Millisecond)
	wide.wantWindow("a window of the first layout after its last Record, less 1ms", wide.record(ok(gen)), 5, 3, 1)

	// At 1.3s the first layout's window holds 400ms to 1.3s; its buckets
	// of 400ms and 900ms go to the new ones of 0 to 500ms and 500ms to
	// 1s, its bucket of 1.2s (the call of 1.299s) to the one of 1s.
	at(1300 * time.Millisecond)
	wide.wantKept("the Record that re-lays", h, wide.record(fail(gen)), gen, countsAt{calls: 4, failures: 3, throttledN: 1}, 1)
	// Counted at 400ms, 900ms, 1.299s and 1.3s, they leave at 2s, 2.5s
	// and 3s: up to 400ms early, never later.
	wide.wantCountsAt(start, []countsAt{
		{2*time.Second - time.Millisecond, 4, 3, 1},
		{2 * time.Second, 3, 2, 0},
		{2500 * time.Millisecond, 2, 1, 0},
		{3 * time.Second, 0, 0, 0},
	})
}

// testLayoutShrinkingKeepsWhatTheNewWindowHolds: taken over by a
// narrower bucket (a shorter window), the counts of old buckets that
// start within the new window are kept; those that start before it have
// left it.
func testLayoutShrinkingKeepsWhatTheNewWindowHolds(t *testing.T, f Factory) {
	h := newHarness(t, f, layoutPolicy(3*time.Second, 6)) // buckets of 500ms
	gen := h.closedGen()
	start := h.now()
	at := func(d time.Duration) { h.clock.Set(start.Add(d)) }
	h.record(ok(gen)) // left the window by 5s
	at(2600 * time.Millisecond)
	h.record(ok(gen), fail(gen))            // the first layout's last Record
	narrow := h.withLayout(time.Second, 10) // buckets of 100ms
	at(4000 * time.Millisecond)
	narrow.record(fail(gen)) // into the old bucket of 4s
	at(5000 * time.Millisecond)
	narrow.wantWindow("a Record of the shorter window, counted in the old layout", narrow.record(ok(gen)), 4, 2, 0)
	// At 5.6s the new window holds 4.7s to 5.6s: of the old buckets
	// live, the one of 4s starts before it, the one of 5s within.
	at(5600 * time.Millisecond)
	r := narrow.record(ok(gen))
	narrow.wantResult("the Record that re-lays", r, closed, gen, 0)
	narrow.wantWindow("the Record that re-lays", r, 2, 0, 0)
	// The call of 5s leaves the new window at 6s.
	narrow.wantCountsAt(start, []countsAt{{6*time.Second - time.Millisecond, 2, 0, 0}, {6 * time.Second, 1, 0, 0}})
}

// testAlternatingLayoutsKeepTheWindowSliding: replicas of two layouts of
// the same window record in turn, every 50ms for 10s: the window holds
// the last window's calls, not everything, and a burst of failures trips
// the ratio on them.
func testAlternatingLayoutsKeepTheWindowSliding(t *testing.T, f Factory) {
	p := basePolicy() // 1s in buckets of 100ms
	p.MinCalls = 20
	a := newHarness(t, f, p)
	b := a.withLayout(time.Second, 3) // buckets of 333ms
	gen := a.closedGen()
	a.record(fail(gen), fail(gen), fail(gen))
	for i := range 200 {
		a.advance(50 * time.Millisecond)
		w := a
		if i%2 == 1 {
			w = b
		}
		w.record(ok(gen))
	}
	for name, w := range map[string]*harness{"the first": a, "the second": b} {
		// 1s of calls at one per 50ms: 20, 21 at a bucket's edge.
		if s := w.snapshot(); s.Failures != 0 || s.Calls < 19 || s.Calls > 21 {
			t.Errorf("after 10s of alternating layouts, a Snapshot under %s: %s; want the failures gone and a second of calls",
				name, showSnapshot(s))
		}
	}
	failures := make([]coordinator.Outcome, 40)
	for i := range failures {
		failures[i] = fail(gen)
	}
	a.advance(50 * time.Millisecond)
	if r := b.record(failures...); r.Transition == nil || !strings.HasPrefix(r.Transition.Reason, "failures ") {
		t.Errorf("40 failures on a second of successes: %s; want the ratio to trip", showResult(r))
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
	// Well within the window's layout (the first's, whose replicas
	// record all along): nothing leaves.
	for i, l := range "ABBCAACBBACCABCABBCAACBACBBACA" {
		w := layouts[l]
		w.advance(time.Duration(5+i*37%20) * time.Millisecond)
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

// testTripUnderAnotherLayout: the rules read the window's counts, in its
// layout: a Record of another layout trips when its outcomes, added to
// them, make a rule hold.
func testTripUnderAnotherLayout(t *testing.T, f Factory) {
	h := newHarness(t, f, basePolicy()) // four calls at 50 % trip
	gen := h.closedGen()
	h.wantNoTrip("three calls, two failures", gen, fail(gen), ok(gen), fail(gen))
	wide := h.withLayout(2*time.Second, 4)
	wide.advance(200 * time.Millisecond)
	wide.wantTrip("the fourth call, under another layout", gen, "failures 2/4 >= 50%", ok(gen))
	if tr := wide.snapshot().LastTrip; tr.Calls != 4 || tr.Failures != 2 {
		t.Errorf("the last trip: %+v; want 4 calls and 2 failures, the window's counts and the new call", tr)
	}
}
