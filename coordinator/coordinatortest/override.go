package coordinatortest

import (
	"errors"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cbgrpc/cbgrpc/coordinator"
)

// The optional shared policy ([coordinator.Controller].SetOverride): a
// coordinator stores an override per scope and a fleet default, merges
// what it is given into what it holds, refuses what would not make a valid
// policy without storing anything, versions every change by
// NextGeneration, tells every answer the scope's version, and publishes
// the change to every Watch that follows the scope (every Watch, for the
// fleet default).

var (
	alice = coordinator.Note{By: "alice", Reason: "payments is fragile today"}
	bob   = coordinator.Note{By: "bob", Reason: "back to normal"}
)

func (h *harness) setOverride(t coordinator.Target, n coordinator.Note, assignments ...string) coordinator.Overrides {
	h.t.Helper()
	o, err := coordinator.ParseOverride(assignments...)
	if err != nil {
		h.t.Fatalf("ParseOverride(%q): %v", assignments, err)
	}
	got, err := h.controller().SetOverride(h.t.Context(), t, o, n)
	if err != nil {
		h.t.Fatalf("SetOverride(%v, %v): %v", t, o, err)
	}
	return got
}

func (h *harness) overrides() coordinator.Overrides {
	h.t.Helper()
	got, err := h.controller().Overrides(h.t.Context(), coordinator.ScopeTarget(h.scope))
	if err != nil {
		h.t.Fatalf("Overrides(%.40q): %v", h.scope, err)
	}
	return got
}

// layer is the PolicyLayer a change at now with n should store.
func (h *harness) layer(prev uint64, n coordinator.Note, assignments ...string) coordinator.PolicyLayer {
	h.t.Helper()
	o, err := coordinator.ParseOverride(assignments...)
	if err != nil {
		h.t.Fatal(err)
	}
	if len(o) == 0 {
		o = nil
	}
	return coordinator.PolicyLayer{Override: o, Version: h.next(prev), By: n.By, Reason: n.Reason, At: h.now()}
}

// sameOverrides compares layers field by field, times by the instant and
// an empty override with none.
func sameOverrides(a, b coordinator.Overrides) bool {
	for _, o := range []*coordinator.Overrides{&a, &b} {
		for _, l := range []*coordinator.PolicyLayer{&o.Fleet, &o.Scope} {
			if len(l.Override) == 0 {
				l.Override = nil
			}
			if !l.At.IsZero() {
				l.At = l.At.UTC()
			}
		}
	}
	return reflect.DeepEqual(a, b)
}

func (h *harness) wantOverrides(what string, got, want coordinator.Overrides) {
	h.t.Helper()
	if !sameOverrides(got, want) {
		h.t.Errorf("%s: %+v; want %+v", what, got, want)
	}
}

// testOverrideMergesAndVersions: SetOverride merges fields into the
// scope's override, "field=" removes one, every change gets a version by
// NextGeneration, and another scope is untouched.
func testOverrideMergesAndVersions(t *testing.T, f Factory) {
	h := newHarness(t, f, basePolicy())
	h.controller()
	h.wantOverrides("a scope never set", h.overrides(), coordinator.Overrides{})

	first := h.layer(0, alice, "FailureRatio=0.3")
	got := h.setOverride(coordinator.ScopeTarget(h.scope), alice, "failure_ratio=0.3")
	h.wantOverrides("the first override", got, coordinator.Overrides{Scope: first})
	h.wantOverrides("Overrides after it", h.overrides(), coordinator.Overrides{Scope: first})

	h.advance(time.Millisecond)
	second := h.layer(first.Version, bob, "FailureRatio=0.3", "OpenFor=30s")
	got = h.setOverride(coordinator.ScopeTarget(h.scope), bob, "open_for=30s")
	h.wantOverrides("a second field, merged", got, coordinator.Overrides{Scope: second})

	// The same millisecond: the version still grows.
	third := h.layer(second.Version, bob, "OpenFor=30s")
	got = h.setOverride(coordinator.ScopeTarget(h.scope), bob, "FailureRatio=")
	h.wantOverrides("a field removed", got, coordinator.Overrides{Scope: third})
	if third.Version != second.Version+1 {
		t.Errorf("versions %d then %d in one millisecond; want one more", second.Version, third.Version)
	}
	h.wantOverrides("another scope", h.on(h.scope+"/other").overrides(), coordinator.Overrides{})
}

// testOverrideFleetDefault: the fleet default is read with every scope's
// override, and set apart from them.
func testOverrideFleetDefault(t *testing.T, f Factory) {
	h := newHarness(t, f, basePolicy())
	h.controller()
	fleet := h.layer(0, alice, "MinCalls=50")
	got := h.setOverride(coordinator.FleetDefault, alice, "MinCalls=50")
	h.wantOverrides("setting the fleet default", got, coordinator.Overrides{Fleet: fleet})

	scope := h.layer(0, bob, "OpenFor=20s")
	got = h.setOverride(coordinator.ScopeTarget(h.scope), bob, "OpenFor=20s")
	h.wantOverrides("a scope's override beside it", got, coordinator.Overrides{Fleet: fleet, Scope: scope})
	h.wantOverrides("another scope", h.on(h.scope+"/other").overrides(), coordinator.Overrides{Fleet: fleet})
	p, src, err := h.overrides().Apply(basePolicy())
	want := basePolicy()
	want.MinCalls, want.OpenFor = 50, 20*time.Second
	if err != nil || src != coordinator.SourceScope || p != want {
		t.Errorf("Apply = %+v, %v, %v; want %+v from the scope override", p, src, err, want)
	}
}

// testOverrideInvalidIsRefused: an override that would not make a valid
// policy is refused naming the field, and nothing is stored.
func testOverrideInvalidIsRefused(t *testing.T, f Factory) {
	h := newHarness(t, f, basePolicy())
	c := h.controller()
	before := h.setOverride(coordinator.ScopeTarget(h.scope), alice, "OpenFor=10s")
	for _, tc := range []struct {
		target coordinator.Target
		o      coordinator.Override
		field  string
	}{
		{coordinator.ScopeTarget(h.scope), coordinator.Override{"FailureRatio": "1.5"}, "FailureRatio"},
		{coordinator.ScopeTarget(h.scope), coordinator.Override{"Probes": "0"}, "Probes"},
		// DefaultPolicy's MaxOpenFor is 60s: an OpenFor past it breaks it.
		{coordinator.ScopeTarget(h.scope), coordinator.Override{"OpenFor": "2m"}, "MaxOpenFor"},
		{coordinator.ScopeTarget(h.scope), coordinator.Override{"Bogus": "1"}, "Bogus"},
		{coordinator.ScopeTarget(h.scope), coordinator.Override{"Window": "ten seconds"}, "Window"},
		{coordinator.FleetDefault, coordinator.Override{"Buckets": "-1"}, "Buckets"},
	} {
		_, err := c.SetOverride(t.Context(), tc.target, tc.o, alice)
		var pe *coordinator.PolicyError
		if !errors.Is(err, coordinator.ErrInvalidPolicy) || !errors.As(err, &pe) || pe.Field != tc.field {
			t.Errorf("SetOverride(%v, %v) = %v; want an invalid policy naming %s", tc.target, tc.o, err, tc.field)
		}
	}
	if _, err := c.SetOverride(t.Context(), coordinator.ScopeTarget(h.scope), coordinator.Override{"MinCalls": "5"},
		coordinator.Note{Reason: "two\nlines"}); !errors.Is(err, coordinator.ErrInvalidNote) {
		t.Errorf("SetOverride with a note of two lines = %v; want ErrInvalidNote", err)
	}
	if _, err := c.SetOverride(t.Context(), coordinator.ScopeTarget(h.scope), coordinator.Override{"MinCalls": "5"},
		coordinator.Note{Reason: "\x9b2J"}); !errors.Is(err, coordinator.ErrInvalidNote) {
		t.Errorf("SetOverride with a note that is not UTF-8 = %v; want ErrInvalidNote", err)
	}
	h.wantOverrides("after the refusals", h.overrides(), before)
}

// testOverrideKeysAreGoNames: an Override's keys are the Go names of
// Policy's fields. ParseOverride reads "min_calls=50" as MinCalls, but a
// key spelt otherwise in an Override given to SetOverride is refused,
// naming the key and the Go name, as a set or as a removal, and nothing
// is stored: no coordinator stores a field it would not apply.
func testOverrideKeysAreGoNames(t *testing.T, f Factory) {
	h := newHarness(t, f, basePolicy())
	c := h.controller()
	if got := h.setOverride(coordinator.ScopeTarget(h.scope), alice, "min_calls=8").Scope.Override; got["MinCalls"] != "8" {
		t.Errorf("SetOverride of ParseOverride(min_calls=8) stored %v; want MinCalls=8", got)
	}
	before := h.overrides()
	for _, tc := range []struct {
		target coordinator.Target
		o      coordinator.Override
		key    string
		name   string
	}{
		{coordinator.ScopeTarget(h.scope), coordinator.Override{"min_calls": "50"}, "min_calls", "MinCalls"},
		{coordinator.ScopeTarget(h.scope), coordinator.Override{"min_calls": ""}, "min_calls", "MinCalls"},
		{coordinator.ScopeTarget(h.scope), coordinator.Override{"OpenFor": "20s", "failureratio": "0.3"}, "failureratio", "FailureRatio"},
		{coordinator.FleetDefault, coordinator.Override{"open-for": "20s"}, "open-for", "OpenFor"},
	} {
		_, err := c.SetOverride(t.Context(), tc.target, tc.o, alice)
		var pe *coordinator.PolicyError
		if !errors.Is(err, coordinator.ErrInvalidPolicy) || !errors.As(err, &pe) || pe.Field != tc.key ||
			!strings.Contains(err.Error(), tc.name) {
			t.Errorf("SetOverride(%v, %v) = %v; want an invalid policy naming %s and %s", tc.target, tc.o, err, tc.key, tc.name)
		}
	}
	h.wantOverrides("after the refusals", h.overrides(), before)
}

// testOverrideReset: a reset removes the override in a new version; a
// reset of nothing changes nothing.
func testOverrideReset(t *testing.T, f Factory) {
	h := newHarness(t, f, basePolicy())
	c := h.controller()
	set := h.setOverride(coordinator.ScopeTarget(h.scope), alice, "MinCalls=8")
	h.advance(time.Second)
	reset := h.layer(set.Scope.Version, bob)
	got, err := c.ResetOverride(t.Context(), coordinator.ScopeTarget(h.scope), bob)
	if err != nil {
		t.Fatalf("ResetOverride: %v", err)
	}
	h.wantOverrides("reset", got, coordinator.Overrides{Scope: reset})
	h.advance(time.Second)
	got, err = c.ResetOverride(t.Context(), coordinator.ScopeTarget(h.scope), alice)
	if err != nil {
		t.Fatalf("ResetOverride again: %v", err)
	}
	h.wantOverrides("reset again", got, coordinator.Overrides{Scope: reset})

	// Setting every field away is a reset.
	h.setOverride(coordinator.FleetDefault, alice, "MinCalls=8")
	h.advance(time.Second)
	fleet := h.layer(h.overrides().Fleet.Version, bob)
	got = h.setOverride(coordinator.FleetDefault, bob, "MinCalls=")
	h.wantOverrides("the last field removed", got, coordinator.Overrides{Fleet: fleet})
}

// testAnswersCarryPolicyVersion: every answer tells the version of the
// scope's override, so that a caller learns of a change on its next
// round trip.
func testAnswersCarryPolicyVersion(t *testing.T, f Factory) {
	h := newHarness(t, f, basePolicy())
	c := h.controller()
	gen := h.closedGen()
	if d := h.admit("before"); d.PolicyVersion != 0 {
		t.Errorf("Admit with no override: PolicyVersion %d; want 0", d.PolicyVersion)
	}
	h.setOverride(coordinator.FleetDefault, alice, "MinCalls=8")
	if d := h.admit("fleet only"); d.PolicyVersion != 0 {
		t.Errorf("Admit with a fleet default only: PolicyVersion %d; want 0, the scope's", d.PolicyVersion)
	}
	v := h.setOverride(coordinator.ScopeTarget(h.scope), alice, "MinCalls=8").Scope.Version
	if d := h.admit("after"); d.PolicyVersion != v {
		t.Errorf("Admit: PolicyVersion %d; want %d", d.PolicyVersion, v)
	}
	if r := h.record(ok(gen)); r.PolicyVersion != v {
		t.Errorf("Record: PolicyVersion %d; want %d", r.PolicyVersion, v)
	}
	h.advance(time.Millisecond)
	got, err := c.ResetOverride(t.Context(), coordinator.ScopeTarget(h.scope), bob)
	if err != nil {
		t.Fatal(err)
	}
	if r := h.record(ok(gen)); r.PolicyVersion != got.Scope.Version || r.PolicyVersion <= v {
		t.Errorf("Record after a reset: PolicyVersion %d; want the reset's, %d", r.PolicyVersion, got.Scope.Version)
	}
	open := h.on(h.scope + "/open")
	open.trip()
	w := open.setOverride(coordinator.ScopeTarget(open.scope), alice, "OpenFor=1s").Scope.Version
	if d := open.admit("open"); d.Verdict != reject || d.PolicyVersion != w {
		t.Errorf("Admit while open: %+v; want a rejection with PolicyVersion %d", d, w)
	}
}

// testPolicyWatchDeliversChanges: a PolicyWatch tells of every change of
// a followed scope's override and of the fleet default, and of no other
// scope's.
func testPolicyWatchDeliversChanges(t *testing.T, f Factory) {
	h := newHarness(t, f, basePolicy())
	c := h.controller()
	ctx, watch := h.watch()
	pw, ok := watch.(coordinator.PolicyWatch)
	if !ok {
		t.Skipf("%T does not implement coordinator.PolicyWatch", watch)
	}
	var mu sync.Mutex
	var heard []coordinator.PolicyChange
	arrived := make(chan struct{}, 16)
	if err := pw.FollowPolicies(ctx, func(ch coordinator.PolicyChange) {
		mu.Lock()
		heard = append(heard, ch)
		mu.Unlock()
		arrived <- struct{}{}
	}); err != nil {
		t.Fatalf("FollowPolicies: %v", err)
	}
	var want []coordinator.PolicyChange
	h.on(h.scope+"/unfollowed").setOverride(coordinator.ScopeTarget(h.scope+"/unfollowed"), alice, "MinCalls=9")
	got := h.setOverride(coordinator.ScopeTarget(h.scope), alice, "MinCalls=9")
	want = append(want, coordinator.PolicyChange{Target: coordinator.ScopeTarget(h.scope), Version: got.Scope.Version})
	got = h.setOverride(coordinator.FleetDefault, alice, "OpenFor=2s")
	want = append(want, coordinator.PolicyChange{Target: coordinator.FleetDefault, Version: got.Fleet.Version})
	h.advance(time.Millisecond)
	reset, err := c.ResetOverride(t.Context(), coordinator.ScopeTarget(h.scope), bob)
	if err != nil {
		t.Fatal(err)
	}
	want = append(want, coordinator.PolicyChange{Target: coordinator.ScopeTarget(h.scope), Version: reset.Scope.Version})
	// A reset of nothing publishes nothing: the next change comes next.
	if _, err := c.ResetOverride(t.Context(), coordinator.ScopeTarget(h.scope), bob); err != nil {
		t.Fatal(err)
	}
	got = h.setOverride(coordinator.FleetDefault, bob, "OpenFor=")
	want = append(want, coordinator.PolicyChange{Target: coordinator.FleetDefault, Version: got.Fleet.Version})

	for range want {
		select {
		case <-arrived:
		case <-ctx.Done():
			t.Fatalf("heard %+v; want %+v", heard, want)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	// In order per target: on a Cluster the fleet default's channel and a
	// scope's may be on different nodes, read by different connections.
	byTarget := func(changes []coordinator.PolicyChange) map[coordinator.Target][]uint64 {
		m := map[coordinator.Target][]uint64{}
		for _, ch := range changes {
			m[ch.Target] = append(m[ch.Target], ch.Version)
		}
		return m
	}
	// A change of the scope not followed would be a target too many.
	if !reflect.DeepEqual(byTarget(heard), byTarget(want)) {
		t.Errorf("heard %+v; want %+v, in order for each target", heard, want)
	}
}
