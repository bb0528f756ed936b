package coordinatortest

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cbgrpc/cbgrpc/coordinator"
	"github.com/cbgrpc/cbgrpc/coordinator/implement"
)

// Snapshot.Policies: every Record carries the policy it was called with,
// and where that came from (RecordRequest.Source). The coordinator
// keeps, per scope, each distinct policy (by its fingerprint) with its
// source and the time of the last Record that carried it, and a Snapshot
// lists those of the last window (of the layout the window was written
// with, else of the reader's policy), newest first, ties broken by
// fingerprint. Every Record carries its policy, stale or not, whatever the
// breaker's state: it tells what a replica runs, not what was counted. A
// birth forgets them, as it forgets everything else; a coordinator keeps
// at most implement.RecentPolicies of them, the newest.

// seen is what a Snapshot should list for p carried at at from source.
func seen(p coordinator.Policy, source coordinator.PolicySource, at time.Time) coordinator.CarriedPolicy {
	return coordinator.CarriedPolicy{Fingerprint: p.Fingerprint(), Policy: p, Source: source, At: at}
}

// recordFrom records outcomes under the harness's policy, from source.
func (h *harness) recordFrom(source coordinator.PolicySource, outcomes ...coordinator.Outcome) coordinator.Result {
	h.t.Helper()
	return h.send(coordinator.RecordRequest{Outcomes: outcomes, Source: source})
}

// wantPolicies checks the policies a Snapshot lists, times by instant.
func (h *harness) wantPolicies(what string, want ...coordinator.CarriedPolicy) {
	h.t.Helper()
	got := h.snapshot().Policies
	if !samePolicies(got, want) {
		h.t.Errorf("%s: Snapshot.Policies\n  %s\nwant\n  %s", what, showPolicies(got), showPolicies(want))
	}
}

// samePolicies compares seen policies field by field, times by instant.
func samePolicies(a, b []coordinator.CarriedPolicy) bool {
	return slices.EqualFunc(a, b, func(x, y coordinator.CarriedPolicy) bool {
		return x.Fingerprint == y.Fingerprint && x.Policy == y.Policy && x.Source == y.Source && x.At.Equal(y.At)
	})
}

func showPolicies(ps []coordinator.CarriedPolicy) string {
	if len(ps) == 0 {
		return "none"
	}
	var lines []string
	for _, p := range ps {
		lines = append(lines, fmt.Sprintf("%s from %v at %s: %s", p.Fingerprint, p.Source, since(p.At), p.Policy.Encode()))
	}
	return strings.Join(lines, "\n  ")
}

// testRecordCarriesItsPolicy: a Record's policy is listed with its source
// and time; Admit carries none; a stale Record, and one while open,
// carry theirs too.
func testRecordCarriesItsPolicy(t *testing.T, f Factory) {
	p := basePolicy()
	h := newHarness(t, f, p)
	gen := h.closedGen()
	h.wantPolicies("born by an Admit, no Record yet")
	h.advance(5 * time.Millisecond)
	h.recordFrom(coordinator.SourceScope, ok(gen))
	h.wantPolicies("after a Record", seen(p, coordinator.SourceScope, h.now()))
	h.advance(5 * time.Millisecond)
	h.record(ok(gen))
	h.wantPolicies("a Record without a source: the code's policy", seen(p, coordinator.SourceCode, h.now()))

	ho := h.on(h.scope + "/open")
	ogen := ho.trip()
	ho.advance(time.Millisecond)
	q := ho.withLayout(2*time.Second, 4)
	q.p.MinCalls = 7
	if r := q.recordFrom(coordinator.SourceFleet, ok(ogen)); r.Stale != 1 || r.Generation != ogen {
		t.Fatalf("a Record while open: %s; want it stale", showResult(r))
	}
	ho.wantPolicies("a stale Record while open",
		seen(q.p, coordinator.SourceFleet, ho.now()), seen(ho.p, coordinator.SourceCode, ho.now().Add(-time.Millisecond)))
}

// testCarriedPoliciesNewestFirst: two policies, two entries, the last carried
// first; one instant, by fingerprint.
func testCarriedPoliciesNewestFirst(t *testing.T, f Factory) {
	h := newHarness(t, f, basePolicy())
	gen := h.closedGen()
	other := h.on(h.scope)
	other.p.FailureRatio = 0.3
	h.record(ok(gen))
	first := h.now()
	h.advance(10 * time.Millisecond)
	other.recordFrom(coordinator.SourceFleet, ok(gen))
	h.wantPolicies("two policies", seen(other.p, coordinator.SourceFleet, h.now()), seen(h.p, coordinator.SourceCode, first))
	h.advance(10 * time.Millisecond)
	h.recordFrom(coordinator.SourceScope, ok(gen))
	h.wantPolicies("the first again, from an override",
		seen(h.p, coordinator.SourceScope, h.now()), seen(other.p, coordinator.SourceFleet, h.now().Add(-10*time.Millisecond)))

	third := h.on(h.scope)
	third.p.MinCalls = 9
	third.record(ok(gen))
	want := []coordinator.CarriedPolicy{seen(h.p, coordinator.SourceScope, h.now()), seen(third.p, coordinator.SourceCode, h.now())}
	slices.SortFunc(want, func(a, b coordinator.CarriedPolicy) int { return strings.Compare(a.Fingerprint, b.Fingerprint) })
	h.wantPolicies("two carried at one instant", append(want, seen(other.p, coordinator.SourceFleet, h.now().Add(-10*time.Millisecond)))...)
}

// testCarriedPolicyLeavesAfterAWindow: a policy is listed for a window after
// the last Record that carried it: the window the counts were written
// with, whatever the reader's policy.
func testCarriedPolicyLeavesAfterAWindow(t *testing.T, f Factory) {
	h := newHarness(t, f, basePolicy())
	gen := h.closedGen()
	h.record(ok(gen))
	first := h.now()
	h.advance(500 * time.Millisecond)
	other := h.on(h.scope)
	other.p.MinCalls = 9
	other.record(ok(gen))
	h.clock.Set(first.Add(h.p.Window - time.Millisecond))
	h.wantPolicies("1ms before a window has passed",
		seen(other.p, coordinator.SourceCode, first.Add(500*time.Millisecond)), seen(h.p, coordinator.SourceCode, first))
	h.clock.Set(first.Add(h.p.Window))
	h.wantPolicies("a window after", seen(other.p, coordinator.SourceCode, first.Add(500*time.Millisecond)))
	h.withLayout(10*time.Second, 10).wantPolicies("a reader with a longer window",
		seen(other.p, coordinator.SourceCode, first.Add(500*time.Millisecond)))
}

// testCarriedPoliciesKeepTheNewest: a fleet out of step leaves at most
// implement.RecentPolicies of them, the newest.
func testCarriedPoliciesKeepTheNewest(t *testing.T, f Factory) {
	h := newHarness(t, f, basePolicy())
	gen := h.closedGen()
	var want []coordinator.CarriedPolicy
	for i := range implement.RecentPolicies + 4 {
		h.advance(time.Millisecond)
		o := h.on(h.scope)
		o.p.MinCalls = 10 + i
		o.record(ok(gen))
		want = append([]coordinator.CarriedPolicy{seen(o.p, coordinator.SourceCode, h.now())}, want...)
	}
	h.wantPolicies(fmt.Sprintf("%d policies", len(want)), want[:implement.RecentPolicies]...)
}
