package coordinatortest

import (
	"testing"
	"time"

	"github.com/cbgrpc/cbgrpc/coordinator"
)

// Snapshot.LastTrip: why and when the breaker last opened by its rules,
// with the window's counts then, kept through recovery until the scope is
// forgotten, so that an operator looking at a breaker that opened, or
// that has closed again, can see why it opened.

func testSnapshotKeepsTheLastTrip(t *testing.T, f Factory) {
	p := basePolicy()
	p.SlowCallDuration, p.SlowCallRatio = time.Second, 0.9 // counted, never the reason
	h := newHarness(t, f, p)
	if s := h.snapshot(); s.LastTrip != (coordinator.Trip{}) {
		t.Errorf("not born: last trip %+v; want none", s.LastTrip)
	}
	gen := h.closedGen()
	h.record(ok(gen), took(gen, time.Hour), fail(gen))
	if s := h.snapshot(); s.LastTrip != (coordinator.Trip{}) {
		t.Errorf("closed, never opened: last trip %+v; want none", s.LastTrip)
	}
	h.advance(5 * time.Millisecond)
	trippedAt := h.now()
	res := h.record(fail(gen), ok(gen))
	if res.Transition == nil || res.Transition.To != open {
		t.Fatalf("Record = %+v; want a trip at 2 failures of 4", res)
	}
	want := coordinator.Trip{At: trippedAt, Reason: res.Transition.Reason, Generation: res.Generation, Calls: 4, Failures: 2, Slow: 1}
	check := func(what string, want coordinator.Trip) {
		t.Helper()
		got := h.snapshot().LastTrip
		if !got.At.IsZero() {
			got.At = got.At.UTC()
		}
		if want.At = want.At.UTC(); got != want {
			t.Errorf("%s: last trip %+v; want %+v", what, got, want)
		}
	}
	check("open", want)

	h.waitOpenPeriod()
	if d := h.admit("probe"); d.Verdict != probe {
		t.Fatalf("Admit after the open period = %+v; want a probe", d)
	}
	check("half-open", want)
	h.advance(3 * time.Millisecond)
	reopenedAt := h.now()
	res = h.settle("probe", fail(want.Generation))
	reopened := coordinator.Trip{At: reopenedAt, Reason: "probe failed", Generation: res.Generation}
	check("reopened by a failed probe", reopened)

	h.waitOpenPeriod()
	closedGen := h.recover()
	check("closed again", reopened)
	h.record(ok(closedGen))
	h.forget(h.now())
	h.wantNotBorn("a window later")
	if s := h.snapshot(); s.LastTrip != (coordinator.Trip{}) {
		t.Errorf("forgotten: last trip %+v; want none", s.LastTrip)
	}
}
