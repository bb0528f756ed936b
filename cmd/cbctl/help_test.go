package main

import (
	"encoding/json"
	"regexp"
	"strings"
	"testing"

	"github.com/cbgrpc/cbgrpc/internal/redistest"
)

// oneDashFlag is a flag written with one dash, as package flag writes it
// and the docs do not.
var oneDashFlag = regexp.MustCompile(`(^|[\s(,])-[a-z][a-z-]+`)

// Help asked for goes to standard output with status 0, so that it can be
// paged; help after a usage error goes to standard error with status 2.
func TestCLIHelp(t *testing.T) {
	c := newCLI(t, "127.0.0.1:1")
	for _, h := range []struct {
		args   []string
		stdout string
	}{
		{[]string{"--help"}, "usage: cbctl [flags] COMMAND [flags] [args]"},
		{[]string{"-h"}, "usage: cbctl [flags] COMMAND"},
		{[]string{"help"}, "  isolate SCOPE --reason TEXT [--for D]  reject every call"},
		{[]string{"--addr", "127.0.0.1:2", "--help"}, "flags every command takes, before or after the command:"},
		{[]string{"help", "list"}, "usage: cbctl list [flags]\n"},
		{[]string{"list", "--help"}, "  --addr HOST:PORT"},
		{[]string{"list", "-h"}, "  --window D"},
		{[]string{"help", "isolate"}, "  --create "},
		{[]string{"isolate", "--help"}, "usage: cbctl isolate [flags] SCOPE --reason TEXT [--for D]"},
		{[]string{"watch", "--json", "-h"}, "  --rescan D"},
		{[]string{"help", "policy"}, "usage: cbctl policy [flags] show|set|reset SCOPE|--default\n"},
		{[]string{"policy", "--help"}, "  cbctl policy set SCOPE field=value...  "},
		{[]string{"help"}, "  doctor [--fleet N] [--replicas N]      check what cbgrpc needs of this Redis"},
		{[]string{"doctor", "--help"}, "  --fleet N  "},
		{[]string{"help", "doctor"}, "exit status: 0 healthy (ok and skip only); 6 warnings"},
	} {
		r := c.want(0, h.stdout, "", h.args...)
		if m := oneDashFlag.FindString(r.stdout); m != "" {
			t.Errorf("cbctl %q: help writes a flag with one dash: %q\n%s", h.args, m, r.stdout)
		}
	}
	usageTexts := []string{"exit status: 0 done", "3 show, isolate, release, disable or enable of a scope that has no\nstate", "4 isolate", "6 doctor that found warnings", "7 doctor that found a failure"}
	for _, want := range usageTexts {
		c.want(0, want, "", "--help")
	}

	for _, u := range []struct {
		args   []string
		stderr string
	}{
		{nil, "usage: cbctl [flags] COMMAND"},
		{[]string{"--json"}, "usage: cbctl [flags] COMMAND"},
		{[]string{"help", "lsit"}, `cbctl: help: unknown command "lsit"`},
		{[]string{"lsit"}, `cbctl: unknown command "lsit" (see cbctl --help)`},
		{[]string{"--nope", "list"}, "cbctl: flag provided but not defined: --nope"},
		{[]string{"--reason", "x", "isolate", "s"}, "cbctl: flag provided but not defined: --reason (before the command go the flags every command takes"},
		{[]string{"list", "--timeout"}, "cbctl: list: flag needs an argument: --timeout"},
		{[]string{"list", "--timeout", "soon"}, `cbctl: list: invalid value "soon" for flag --timeout: `},
		{[]string{"list", "--json=maybe"}, `cbctl: list: invalid boolean value "maybe" for --json: `},
	} {
		if r := c.want(2, "", u.stderr, u.args...); r.stdout != "" {
			t.Errorf("cbctl %q: a usage error printed on stdout:\n%s", u.args, r.stdout)
		}
	}
}

// --version prints the module version cbctl was built from.
func TestCLIVersion(t *testing.T) {
	c := newCLI(t, "127.0.0.1:1")
	for _, args := range [][]string{{"--version"}, {"--addr", "127.0.0.1:2", "--version"}} {
		r := c.want(0, "", "", args...)
		if !regexp.MustCompile(`^cbctl (\(devel\)|v[0-9]+\.[0-9]+\.[0-9]+\S*)\n$`).MatchString(r.stdout) {
			t.Errorf("cbctl %q printed %q; want cbctl and a module version", args, r.stdout)
		}
	}
	c.want(2, "", "flag provided but not defined: --version", "list", "--version")
}

// The flags every command takes may come before the command; the
// command's own flags go after it.
func TestCLIGlobalFlagsBeforeCommand(t *testing.T) {
	srv := redistest.Start(t)
	f := newFleet(t, srv.Client(t))
	f.trip("svc/a")
	// The environment points nowhere: only the flag reaches the Redis.
	c := newCLI(t, "127.0.0.1:1")
	c.want(0, "svc/a", "", "--addr", srv.Addr(), "list")
	r := c.want(0, "", "", "--addr", srv.Addr(), "--json", "--timeout", "5s", "show", "svc/a")
	var s snapshotJSON
	if err := json.Unmarshal([]byte(r.stdout), &s); err != nil || s.State != "open" {
		t.Errorf("--json before show: %+v, %v\n%s", s, err, r.stdout)
	}
	c.wantChange(f, "svc/a", "open -> isolated gen %d: isolated by tester: before", "--addr="+srv.Addr(), "isolate", "svc/a", "--reason", "before")
	// After the command, a flag beats the same flag before it.
	c.want(0, "svc/a", "", "--addr", "127.0.0.1:1", "list", "--addr", srv.Addr())
	c.want(0, "svc/a", "", "--addr", srv.Addr(), "--", "list")
	c.want(1, "", "cbctl: list: ", "--addr", "127.0.0.1:1", "list")
	if !strings.Contains(c.run("--addr", srv.Addr(), "list", "--json").stdout, `"scope": "svc/a"`) {
		t.Error("list --json after --addr: no svc/a")
	}
}
