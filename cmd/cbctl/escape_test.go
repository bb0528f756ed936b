package main

import (
	"context"
	"strings"
	"testing"

	"github.com/cbgrpc/cbgrpc/coordinator"
	"github.com/cbgrpc/cbgrpc/internal/redistest"
)

// junk is what a note must not carry to a terminal: 0x9b alone is no
// UTF-8, but a control sequence introducer to an 8-bit terminal.
const junk = "\x9b2J\x1b[31m"

// A note that is not UTF-8, or holds a control character, is refused as
// a usage error naming its flag, and the error does not echo it raw.
func TestCLINoteNotTextIsRefused(t *testing.T) {
	srv := redistest.Start(t)
	c := newCLI(t, srv.Addr())
	for _, tc := range []struct {
		args []string
		flag string
	}{
		{[]string{"isolate", "svc/a", "--create", "--reason", junk}, "--reason: "},
		{[]string{"isolate", "svc/a", "--create", "--reason", "outage", "--by", "\xffalice"}, "--by: "},
		{[]string{"disable", "svc/a", "--create", "--reason", "\u009b2J"}, "--reason: "},
		{[]string{"release", "svc/a", "--create", "--reason", "fixed\xe2\x82"}, "--reason: "},
		{[]string{"policy", "set", "svc/a", "min_calls=5", "--create", "--reason", junk}, "--reason: "},
	} {
		r := c.want(2, "", tc.flag+"invalid note: ", tc.args...)
		if strings.ContainsAny(r.stderr, "\x9b\xff\x1b") || strings.Contains(r.stderr, "\u009b") {
			t.Errorf("cbctl %q: stderr %q echoes the note raw", tc.args, r.stderr)
		}
	}
	if r, err := srv.Client(t).Keys(context.Background(), "*").Result(); err != nil || len(r) != 0 {
		t.Errorf("keys after the refused commands: %q, %v; want none", r, err)
	}
}

// A note already stored with bytes that are not text (by an older cbctl,
// or by hand in redis-cli) is shown escaped by show and list, never raw.
func TestCLIStoredJunkIsEscaped(t *testing.T) {
	srv := redistest.Start(t)
	c := newCLI(t, srv.Addr())
	c.want(0, "", "", "isolate", "svc/junk", "--create", "--reason", "placeholder", "--by", "alice")
	rdb := srv.Client(t)
	ctx := context.Background()
	states, err := rdb.Keys(ctx, "*:state").Result()
	if err != nil || len(states) != 1 {
		t.Fatalf("state keys: %q, %v; want one", states, err)
	}
	if err := rdb.HSet(ctx, states[0], "note_reason", junk+" outage", "note_by", "\xffalice").Err(); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"show", "svc/junk"}, {"list"}} {
		r := c.want(0, `"\x9b2J\x1b[31m outage"`, "", args...)
		if strings.ContainsAny(r.stdout, "\x9b\xff\x1b") {
			t.Errorf("cbctl %q: stdout %q holds the stored bytes raw", args, r.stdout)
		}
		if !strings.Contains(r.stdout, `"\xffalice"`) {
			t.Errorf("cbctl %q: stdout %q; want the note's by escaped", args, r.stdout)
		}
	}
}

// watch prints a transition's reason, which holds the stored note,
// escaped; as every printer does with text cbctl did not write.
func TestTransitionLineEscapesReason(t *testing.T) {
	line := transitionLine(coordinator.Transition{Scope: "svc/junk", From: coordinator.StateOpen, To: coordinator.StateIsolated,
		Generation: 4, Reason: "isolated: " + junk})
	if want := `open -> isolated gen 4: "isolated: \x9b2J\x1b[31m"`; !strings.HasSuffix(line, want) {
		t.Errorf("transitionLine = %q; want it to end %q", line, want)
	}
	for _, s := range []string{"plain outage", "INC-7: payments down (eu-west)", "café ☕"} {
		if got := quoteText(s); got != s {
			t.Errorf("quoteText(%q) = %q; want it as is: it is printable", s, got)
		}
	}
}
