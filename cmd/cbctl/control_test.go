package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/cbgrpc/cbgrpc/internal/redistest"
)

// Acting on a scope that has no state is most likely a typo: it fails with
// exit status 3 and creates nothing, unless --create is given.
func TestCLIControlNotFound(t *testing.T) {
	srv := redistest.Start(t)
	f := newFleet(t, srv.Client(t))
	c := newCLI(t, srv.Addr())
	for _, args := range [][]string{
		{"isolate", "nosuch/scope", "--reason", "typo"},
		{"isolate", "nosuch/scope", "--reason", "typo", "--for", "2m", "--json"},
		{"release", "nosuch/scope"},
		{"disable", "nosuch/scope", "--reason", "typo"},
		{"enable", "nosuch/scope", "--json"},
	} {
		r := c.want(3, "", fmt.Sprintf("cbctl: %s: scope nosuch/scope not found: ", args[0]), args...)
		if !strings.Contains(r.stderr, "--create") || strings.Count(r.stderr, "\n") != 1 || r.stdout != "" {
			t.Errorf("cbctl %q: want one line on stderr that names --create, nothing on stdout; got\nstdout: %q\nstderr: %q", args, r.stdout, r.stderr)
		}
		if g := f.generation("nosuch/scope"); g != 0 {
			t.Fatalf("cbctl %q created the scope: generation %d", args, g)
		}
	}
	if r, err := srv.Client(t).Keys(context.Background(), "*").Result(); err != nil || len(r) != 0 {
		t.Errorf("keys after the refused commands: %q, %v; want none", r, err)
	}

	c.wantChange(f, "nosuch/scope", "closed -> isolated gen %d: isolated by tester: on purpose",
		"isolate", "nosuch/scope", "--reason", "on purpose", "--create")
	c.wantChange(f, "new/disabled", "closed -> disabled gen %d", "disable", "--create", "new/disabled", "--reason", "on purpose")
	c.wantChange(f, "new/closed", "unchanged: new/closed is closed in generation %d", "release", "new/closed", "--create")

	// A scope the fleet uses needs no --create, whatever its state.
	f.trip("svc/used")
	c.wantChange(f, "svc/used", "open -> isolated gen %d", "isolate", "svc/used", "--reason", "x")
	f.admit("svc/closed")
	c.wantChange(f, "svc/closed", "unchanged: svc/closed is closed in generation %d", "release", "svc/closed")
	c.want(3, "", "cbctl: show: scope nosuch/other not found: no breaker holds state for it", "show", "nosuch/other")
}

// No call has the empty scope, so a command on it is refused as a usage
// error naming SCOPE, --create or not, and stores nothing.
func TestCLIEmptyScopeIsRefused(t *testing.T) {
	srv := redistest.Start(t)
	c := newCLI(t, srv.Addr())
	for _, args := range [][]string{
		{"isolate", "", "--reason", "typo", "--create"},
		{"disable", "", "--reason", "typo", "--create"},
		{"release", "", "--create"},
		{"enable", "", "--create"},
		{"show", ""},
		{"policy", "set", "", "min_calls=5", "--create"},
		{"policy", "reset", ""},
		{"policy", "show", ""},
	} {
		r := c.want(2, "", "SCOPE: invalid scope: the scope is empty", args...)
		if strings.Count(r.stderr, "\n") != 1 || r.stdout != "" {
			t.Errorf("cbctl %q: want one line on stderr, nothing on stdout; got\nstdout: %q\nstderr: %q", args, r.stdout, r.stderr)
		}
	}
	if r, err := srv.Client(t).Keys(context.Background(), "*").Result(); err != nil || len(r) != 0 {
		t.Errorf("keys after the refused commands: %q, %v; want none", r, err)
	}
}

// Isolating an isolated breaker, or disabling a disabled one, makes no
// transition but replaces the note and the end: cbctl says what changed,
// as show shows it afterwards.
func TestCLIControlReportsUpdate(t *testing.T) {
	srv := redistest.Start(t)
	f := newFleet(t, srv.Client(t))
	c := newCLI(t, srv.Addr())
	const scope = "svc/pkg.S/Down"
	f.trip(scope)
	c.wantChange(f, scope, "open -> isolated gen %d: isolated by alice: first", "isolate", scope, "--reason", "first", "--by", "alice")
	gen := f.generation(scope)
	show := func() snapshotJSON {
		t.Helper()
		r := c.want(0, "", "", "show", scope, "--json")
		var s snapshotJSON
		if err := json.Unmarshal([]byte(r.stdout), &s); err != nil || s.Operator == nil {
			t.Fatalf("show --json: %+v, %v\n%s", s, err, r.stdout)
		}
		return s
	}

	// New reason, by and end.
	r := c.want(0, "", "", "isolate", scope, "--reason", "second", "--for", "2m")
	s := show()
	if s.Operator.Reason != "second" || s.Operator.For != "2m0s" || s.OpenUntil == "" {
		t.Fatalf("show after the second isolate: %+v", s)
	}
	want := fmt.Sprintf(`updated: %s stays isolated in generation %d: note "by alice: first" -> "by tester for 2m0s: second"; ends when released -> %s`+"\n",
		scope, gen, s.OpenUntil)
	if r.stdout != want {
		t.Errorf("isolate again printed\n%q\nwant\n%q", r.stdout, want)
	}
	if at, err := time.Parse(timeFormat, s.OpenUntil); err != nil || time.Until(at) < time.Minute || time.Until(at) > 3*time.Minute {
		t.Errorf("open until %s, %v: want about 2m from now", s.OpenUntil, err)
	}

	// --json: the note and the end, from and to.
	r = c.want(0, "", "", "isolate", scope, "--reason", "third", "--for", "5m", "--json")
	var res resultJSON
	if err := json.Unmarshal([]byte(r.stdout), &res); err != nil {
		t.Fatalf("isolate --json: %v\n%s", err, r.stdout)
	}
	after := show()
	u := res.Updated
	switch {
	case !res.Changed || res.Transition == nil || res.Transition.From != "isolated" || res.Transition.To != "isolated" ||
		res.State != "isolated" || res.Generation != gen || u == nil:
		t.Errorf("isolate --json again: %+v; want changed, isolated -> isolated (the end moved), in generation %d, updated", res, gen)
	case u.Note == nil || u.Note.From != (noteJSON{By: "tester", Reason: "second", For: "2m0s"}) || u.Note.To != *after.Operator:
		t.Errorf("updated note: %+v; want from the second note to %+v\n%s", u.Note, *after.Operator, r.stdout)
	case u.OpenUntil == nil || u.OpenUntil.From != s.OpenUntil || u.OpenUntil.To != after.OpenUntil:
		t.Errorf("updated open_until: %+v; want from %s to %s\n%s", u.OpenUntil, s.OpenUntil, after.OpenUntil, r.stdout)
	}

	// The same note without --for: only the end changes, to none.
	c.want(0, fmt.Sprintf(`updated: %s stays isolated in generation %d: note "by tester for 5m0s: third" -> "by tester: third"; ends %s -> when released`,
		scope, gen, after.OpenUntil), "", "isolate", scope, "--reason", "third")
	// Nothing to change.
	r = c.want(0, "", "", "isolate", scope, "--reason", "third", "--json")
	res = resultJSON{}
	if err := json.Unmarshal([]byte(r.stdout), &res); err != nil || res.Changed || res.Updated != nil {
		t.Errorf("isolate with the same note: %+v, %v; want unchanged\n%s", res, err, r.stdout)
	}
	c.want(0, fmt.Sprintf("unchanged: %s is isolated in generation %d\n", scope, gen), "", "isolate", scope, "--reason", "third")

	// disable of a disabled breaker replaces its note.
	c.wantChange(f, scope, "isolated -> disabled gen %d", "disable", scope, "--reason", "flapping")
	c.want(0, fmt.Sprintf(`updated: %s stays disabled in generation %d: note "by tester: flapping" -> "by bob: INC-7"`, scope, f.generation(scope)),
		"", "disable", scope, "--reason", "INC-7", "--by", "bob")
	if s := show(); s.Operator.By != "bob" || s.Operator.Reason != "INC-7" {
		t.Errorf("show after disable again: %+v", s.Operator)
	}
}
