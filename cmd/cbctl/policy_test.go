package main

import (
	"context"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/cbgrpc/cbgrpc/coordinator"
	"github.com/cbgrpc/cbgrpc/internal/redistest"
)

// overrides is what the coordinator stores for scope and the fleet.
func (f *fleet) overrides(scope string) coordinator.Overrides {
	f.t.Helper()
	o, err := f.c.Overrides(context.Background(), coordinator.ScopeTarget(scope))
	if err != nil {
		f.t.Fatal(err)
	}
	return o
}

// record has the fleet record one success for scope, with the policy p
// that came from src, as a Breaker that applied an override does.
func (f *fleet) record(scope string, p coordinator.Policy, src coordinator.PolicySource) {
	f.t.Helper()
	ctx := context.Background()
	d, err := f.c.Admit(ctx, coordinator.AdmitRequest{Scope: scope, Policy: p, Claim: "claim"})
	if err != nil {
		f.t.Fatal(err)
	}
	if _, err := f.c.Record(ctx, coordinator.RecordRequest{Scope: scope, Policy: p, Outcomes: []coordinator.Outcome{{Generation: d.Generation}}, Source: src}); err != nil {
		f.t.Fatal(err)
	}
}

func decodePolicy(t *testing.T, r ran) policyJSON {
	t.Helper()
	var out policyJSON
	if err := json.Unmarshal([]byte(r.stdout), &out); err != nil {
		t.Fatalf("policy --json: %v\n%s", err, r.stdout)
	}
	return out
}

// TestCLIPolicySetShowReset: set merges fields into the scope's override
// or the fleet default and prints what is stored and what it makes over
// DefaultPolicy; show prints the layers; reset removes one, and a reset
// of nothing says so.
func TestCLIPolicySetShowReset(t *testing.T) {
	srv := redistest.Start(t)
	f := newFleet(t, srv.Client(t))
	c := newCLI(t, srv.Addr())
	const scope = "pay/Charge"

	// A scope with neither state nor override is most likely a typo.
	c.want(3, "", "cbctl: policy: scope pay/Charge not found: ", "policy", "set", scope, "failure_ratio=0.3")
	c.want(3, "", "and it has no override", "policy", "show", scope)
	if o := f.overrides(scope); o.Scope.Version != 0 {
		t.Fatalf("a refused set stored %+v", o.Scope)
	}
	f.admit(scope)

	r := c.want(0, "scope override: FailureRatio=0.3 OpenFor=30s\n", "",
		"policy", "set", scope, "failure_ratio=0.3", "OpenFor=30s", "--reason", "INC-7", "--by", "alice")
	o := f.overrides(scope)
	if o.Scope.Override.String() != "FailureRatio=0.3 OpenFor=30s" || o.Scope.By != "alice" || o.Scope.Reason != "INC-7" || o.Scope.Version == 0 {
		t.Fatalf("stored after set: %+v", o.Scope)
	}
	want := coordinator.DefaultPolicy()
	want.FailureRatio, want.OpenFor = 0.3, 30*time.Second
	for _, line := range []string{
		"fleet default:  none\n",
		"by alice: INC-7\n",
		"result:         " + want.Encode() + "\n",
		"fingerprint:    " + want.Fingerprint() + " ",
	} {
		if !strings.Contains(r.stdout, line) {
			t.Errorf("policy set printed\n%s\nwant a line %q", r.stdout, line)
		}
	}

	// Merged: a field removed, one added, the author from $CBCTL_BY.
	out := decodePolicy(t, c.want(0, "", "", "policy", "set", scope, "open_for=", "MinCalls=8", "--json"))
	want.OpenFor, want.MinCalls = coordinator.DefaultPolicy().OpenFor, 8
	switch {
	case out.Scope == nil || *out.Scope != scope || out.Changed == nil || !*out.Changed || out.ScopeOverride == nil:
		t.Errorf("set --json: %+v", out)
	case !reflect.DeepEqual(out.ScopeOverride.Override, map[string]string{"FailureRatio": "0.3", "MinCalls": "8"}) ||
		out.ScopeOverride.By != "tester" || out.ScopeOverride.Version <= o.Scope.Version:
		t.Errorf("set --json: scope override %+v; want FailureRatio and MinCalls by tester, in a later version than %d", out.ScopeOverride, o.Scope.Version)
	case out.Result == nil || out.Result.Fingerprint != want.Fingerprint() || !reflect.DeepEqual(out.Result.Policy, policyMap(want)) || out.Result.Error != "":
		t.Errorf("set --json: result %+v; want %s", out.Result, want.Encode())
	case len(out.FleetDefault.Override) != 0 || out.FleetDefault.Version != 0 || out.InForce != nil || out.PoliciesSeen != nil:
		t.Errorf("set --json: %+v; want no fleet default, nothing of show", out)
	}

	// The fleet default: for every scope, shown with each.
	r = c.want(0, "fleet default: MinCalls=50\n", "", "policy", "set", "--default", "min_calls=50", "--reason", "INC-8")
	if strings.Contains(r.stdout, "scope") {
		t.Errorf("policy set --default printed a scope:\n%s", r.stdout)
	}
	if o := f.overrides("any/scope"); o.Fleet.Override.String() != "MinCalls=50" || o.Fleet.Reason != "INC-8" {
		t.Errorf("fleet default stored: %+v", o.Fleet)
	}
	r = c.want(0, "", "", "policy", "show", scope)
	for _, line := range []string{"scope:          pay/Charge\n", "fleet default:  MinCalls=50\n", "scope override: MinCalls=8 FailureRatio=0.3\n", "by tester: INC-8\n"} {
		if !strings.Contains(r.stdout, line) {
			t.Errorf("policy show printed\n%s\nwant a line %q", r.stdout, line)
		}
	}
	out = decodePolicy(t, c.want(0, "", "", "policy", "show", "--default", "--json"))
	if out.Scope != nil || out.ScopeOverride != nil || out.FleetDefault.Override["MinCalls"] != "50" || out.FleetDefault.At == "" {
		t.Errorf("show --default --json: %+v", out)
	}

	// reset, then a reset of nothing.
	r = c.want(0, "scope override: none\n", "", "policy", "reset", scope, "--reason", "INC-7 over")
	if strings.Contains(r.stdout, "unchanged") {
		t.Errorf("the first reset printed\n%s", r.stdout)
	}
	if o := f.overrides(scope); len(o.Scope.Override) != 0 || o.Scope.Reason != "INC-7 over" {
		t.Errorf("stored after reset: %+v", o.Scope)
	}
	if r := c.want(0, "", "", "policy", "reset", scope); r.stdout != "unchanged: scope pay/Charge has no override\n" {
		t.Errorf("a reset of nothing printed\n%s", r.stdout)
	}
	out = decodePolicy(t, c.want(0, "", "", "policy", "reset", "--default", "--json"))
	if out.Changed == nil || !*out.Changed || len(out.FleetDefault.Override) != 0 || out.Result.Fingerprint != coordinator.DefaultPolicy().Fingerprint() {
		t.Errorf("reset --default --json: %+v", out)
	}

	// --create sets an override for a scope no replica has called yet;
	// from then on the override makes it known, without state.
	c.want(0, "scope override: MinCalls=5\n", "", "policy", "set", "new/scope", "min_calls=5", "--create")
	c.want(0, "scope override: MinCalls=6\n", "", "policy", "set", "new/scope", "min_calls=6")
	c.want(0, "in force:       unknown: no Record carried a policy in the last window\npolicies seen:  0\n", "", "policy", "show", "new/scope")
	c.want(0, "", "", "policy", "reset", "new/scope")
	c.want(0, "scope override: none\n", "", "policy", "show", "new/scope")
	if g := f.generation("new/scope"); g != 0 {
		t.Errorf("policy commands gave birth to new/scope: generation %d", g)
	}
}

// TestCLIPolicyRefusesBadInput: a field or value that does not work is a
// usage error whose message names the field, and nothing is stored.
func TestCLIPolicyRefusesBadInput(t *testing.T) {
	srv := redistest.Start(t)
	f := newFleet(t, srv.Client(t))
	c := newCLI(t, srv.Addr())
	const scope = "pay/Charge"
	f.admit(scope)
	c.want(0, "", "", "policy", "set", scope, "OpenFor=10s")
	c.want(0, "", "", "policy", "set", "--default", "MinCalls=30")
	before := f.overrides(scope)
	for _, tc := range []struct {
		args   []string
		stderr string
	}{
		// Refused by the coordinator: the value parses, the policy does not work.
		{[]string{"set", scope, "failure_ratio=1.5"}, "FailureRatio must be below 1"},
		{[]string{"set", scope, "probes=0"}, "Probes"},
		{[]string{"set", scope, "open_for=2m"}, "MaxOpenFor"},
		{[]string{"set", "--default", "buckets=-1"}, "Buckets"},
		// Refused before anything is sent.
		{[]string{"set", scope, "bogus=1"}, "bogus is no field of a policy; the fields are Window, Buckets,"},
		{[]string{"set", scope, "window=ten"}, `Window must be a duration such as 30s or 1m, got "ten"`},
		{[]string{"set", scope, "failure_ratio"}, "failure_ratio is not field=value"},
		{[]string{"set", scope}, "set: want at least one field=value"},
		{[]string{"set", "--default"}, "set: want at least one field=value"},
		{[]string{"set", scope, "min_calls=5", "--reason", "two\nlines"}, "invalid note"},
		{[]string{"set", "--default", "min_calls=5", "--create"}, "--create goes with set SCOPE"},
		{[]string{"reset", scope, "min_calls=5"}, "reset takes no field=value"},
		{[]string{"show", scope, "--by", "alice"}, "--by and --reason go with set and reset"},
		{[]string{"show"}, "show: want a SCOPE, or --default"},
		{nil, "want show, set or reset"},
		{[]string{"frob", scope}, "want show, set or reset"},
	} {
		r := c.want(2, "", "cbctl: policy: ", append([]string{"policy"}, tc.args...)...)
		if !strings.Contains(r.stderr, tc.stderr) || strings.Count(r.stderr, "\n") != 1 || r.stdout != "" {
			t.Errorf("cbctl policy %q: stdout %q, stderr %q; want one line on stderr naming %q", tc.args, r.stdout, r.stderr, tc.stderr)
		}
	}
	if after := f.overrides(scope); !reflect.DeepEqual(after, before) {
		t.Errorf("stored after the refusals: %+v; want as before, %+v", after, before)
	}
}

// TestCLIPolicyInForce: policy show and show report the policy the last
// Record carried, where it came from, and every other policy Records
// carried in the window when there are more.
func TestCLIPolicyInForce(t *testing.T) {
	srv := redistest.Start(t)
	f := newFleet(t, srv.Client(t))
	c := newCLI(t, srv.Addr())
	const scope = "pay/Charge"
	code := f.p
	f.record(scope, code, coordinator.SourceCode)
	c.want(0, "policy in force:      "+code.Fingerprint()+" (code)\npolicies seen:        1\n", "", "show", scope)
	c.want(0, "in force:       "+code.Fingerprint()+" (code), last recorded ", "", "policy", "show", scope)

	// One replica applied the override, another has not yet.
	c.want(0, "", "", "policy", "set", scope, "failure_ratio=0.3", "open_for=30s")
	r := c.want(0, "no Record since the override changed at ", "", "policy", "show", scope)
	if !strings.Contains(r.stdout, "(code)") {
		t.Errorf("policy show before any Record carried the override:\n%s", r.stdout)
	}
	o := f.overrides(scope)
	over, src, err := o.Apply(code)
	if err != nil || src != coordinator.SourceScope {
		t.Fatal(src, err)
	}
	f.record(scope, over, coordinator.SourceScope)

	r = c.want(0, "", "", "policy", "show", scope)
	for _, line := range []string{
		"in force:       " + over.Fingerprint() + " (scope override), last recorded ",
		"                " + over.Encode() + "\n",
		"policies seen:  2 in the last window: replicas differ, or the policy changed in it\n",
		"                " + code.Fingerprint() + " (code), last recorded ",
		": FailureRatio=0.5 OpenFor=" + code.OpenFor.String() + "\n",
	} {
		if !strings.Contains(r.stdout, line) {
			t.Errorf("policy show printed\n%s\nwant a line with %q", r.stdout, line)
		}
	}
	if strings.Contains(r.stdout, "no Record since") {
		t.Errorf("policy show after a Record carried the override:\n%s", r.stdout)
	}
	out := decodePolicy(t, c.want(0, "", "", "policy", "show", scope, "--json"))
	switch {
	case out.PoliciesSeen == nil || *out.PoliciesSeen != 2 || len(out.Policies) != 2:
		t.Errorf("policy show --json: %+v; want 2 policies seen", out)
	case out.InForce == nil || out.InForce.Fingerprint != over.Fingerprint() || out.InForce.Source != "scope override" ||
		out.InForce.At == "" || out.InForce.Policy != nil || !reflect.DeepEqual(out.Policies[0].Policy, policyMap(over)):
		t.Errorf("policy show --json: in force %+v; want %s from the scope override", out.InForce, over.Fingerprint())
	case out.Policies[1].Fingerprint != code.Fingerprint() || out.Policies[1].Source != "code":
		t.Errorf("policy show --json: second policy %+v; want the code's", out.Policies[1])
	}

	c.want(0, "policy in force:      "+over.Fingerprint()+" (scope override)\npolicies seen:        2 (replicas differ, or the policy changed in the window: cbctl policy show SCOPE)\n", "", "show", scope)
	var s snapshotJSON
	if err := json.Unmarshal([]byte(c.want(0, "", "", "show", scope, "--json").stdout), &s); err != nil {
		t.Fatal(err)
	}
	if s.Policy == nil || s.Policy.Fingerprint != over.Fingerprint() || s.Policy.Source != "scope override" || s.Policy.Policy != nil || s.PoliciesSeen != 2 {
		t.Errorf("show --json: policy %+v, %d seen; want %s from the scope override, of 2", s.Policy, s.PoliciesSeen, over.Fingerprint())
	}

	// The dashboard's rows carry the same, for its tile's "2 policies".
	var page pageJSON
	decode(t, startServe(t, srv.Addr(), nil).want(request{path: "/api/scopes"}, 200).body, &page)
	if len(page.Rows) != 1 || page.Rows[0].PoliciesSeen != 2 || page.Rows[0].Policy == nil || page.Rows[0].Policy.Fingerprint != over.Fingerprint() {
		t.Errorf("dashboard rows: %+v; want the scope with 2 policies seen, %s in force", page.Rows, over.Fingerprint())
	}
}
