package main

import (
	"bufio"
	"context"
	"os/exec"
	"strings"
	"testing"

	cbredis "github.com/cbgrpc/cbgrpc/coordinator/redis"
	"github.com/cbgrpc/cbgrpc/internal/redistest"
)

// corruptFleet makes three scopes, svc/a tripped, svc/b closed and
// svc/bad, whose window key then holds a string.
func corruptFleet(t *testing.T) (*redistest.Server, *fleet) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	f := newFleet(t, rdb)
	f.trip("svc/a")
	f.report("svc/b", "", false, 1)
	f.report("svc/bad", "", false, 1)
	if err := rdb.Set(context.Background(), redistest.ScopeKey(cbredis.DefaultPrefix, "svc/bad", "window"), "junk", 0).Err(); err != nil {
		t.Fatal(err)
	}
	return srv, f
}

// TestCLIListShowsCorruptScope: one scope whose keys hold junk is listed
// as corrupt beside the others, in text and JSON, and list exits 5 saying
// why on standard error.
func TestCLIListShowsCorruptScope(t *testing.T) {
	srv, _ := corruptFleet(t)
	c := newCLI(t, srv.Addr())
	r := c.want(5, "svc/b", "WRONGTYPE", "list")
	var rows []string
	for _, line := range strings.Split(strings.TrimSpace(r.stdout), "\n")[1:] {
		f := strings.Fields(line)
		rows = append(rows, f[0]+" "+f[1])
	}
	if got, want := strings.Join(rows, ", "), "svc/a open, svc/b closed, svc/bad corrupt"; got != want {
		t.Errorf("list printed rows %q; want %q", got, want)
	}
	if !strings.Contains(r.stderr, `"svc/bad"`) || !strings.Contains(r.stderr, "corrupt") {
		t.Errorf("list said %q; want it to name the corrupt scope", r.stderr)
	}

	r = c.want(5, "", "WRONGTYPE", "list", "--json")
	var list []map[string]any
	decode(t, r.stdout, &list)
	if len(list) != 3 {
		t.Fatalf("list --json printed %d scopes; want 3: %s", len(list), r.stdout)
	}
	if bad := list[2]; bad["scope"] != "svc/bad" || bad["state"] != "corrupt" || !strings.Contains(bad["corrupt"].(string), "WRONGTYPE") {
		t.Errorf("list --json: %v; want svc/bad corrupt, saying why", bad)
	}
	if a := list[0]; a["scope"] != "svc/a" || a["state"] != "open" || a["corrupt"] != nil {
		t.Errorf("list --json: %v; want svc/a open", a)
	}
}

// TestCLIWatchFollowsBesideCorruptScope: watch says which scope is
// corrupt, and follows every scope.
func TestCLIWatchFollowsBesideCorruptScope(t *testing.T) {
	srv, _ := corruptFleet(t)
	cmd := exec.Command(binary, "watch")
	cmd.Env = []string{"CBCTL_REDIS_ADDR=" + srv.Addr()}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		cmd.Process.Kill()
		cmd.Wait()
	}()
	var said []string
	for sc := bufio.NewScanner(stderr); sc.Scan(); {
		said = append(said, sc.Text())
		if strings.Contains(sc.Text(), "following") {
			break
		}
	}
	if got := strings.Join(said, "\n"); !strings.Contains(got, `scope svc/bad listed as corrupt`) || !strings.HasSuffix(got, "following 3 scopes") {
		t.Errorf("watch said:\n%s\nwant svc/bad named corrupt, then 3 scopes followed", got)
	}
}

// TestServeShowsCorruptScope: the dashboard lists the corrupt scope as
// such, first in the order by state, and the others as usual.
func TestServeShowsCorruptScope(t *testing.T) {
	srv, _ := corruptFleet(t)
	s := startServe(t, srv.Addr(), nil)
	var p struct {
		Scopes int            `json:"scopes"`
		States map[string]int `json:"states"`
		Rows   []map[string]any
		Status map[string]any `json:"status"`
	}
	decode(t, s.want(request{path: "/api/scopes"}, 200).body, &p)
	if p.Scopes != 3 || p.States["corrupt"] != 1 || p.States["open"] != 1 || p.States["closed"] != 1 || len(p.Rows) != 3 {
		t.Fatalf("dashboard: %d scopes, states %v, %d rows; want 3: corrupt, open and closed", p.Scopes, p.States, len(p.Rows))
	}
	if bad := p.Rows[0]; bad["scope"] != "svc/bad" || bad["state"] != "corrupt" || !strings.Contains(bad["corrupt"].(string), "WRONGTYPE") {
		t.Errorf("dashboard's first row %v; want svc/bad, corrupt", bad)
	}
}

// TestCLICorruptReasonIsEscaped: the error that names what a corrupt scope
// holds quotes the stored bytes, and cbctl prints it escaped: a stored
// control sequence never reaches the terminal raw through an error.
func TestCLICorruptReasonIsEscaped(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	f := newFleet(t, rdb)
	f.report("svc/ok", "", false, 1)
	f.report("svc/bad", "", false, 1)
	junk := "1\x1b[2J\x9b2J"
	if err := rdb.HSet(context.Background(), redistest.ScopeKey(cbredis.DefaultPrefix, "svc/bad", "state"), "generation", junk).Err(); err != nil {
		t.Fatal(err)
	}
	r := newCLI(t, srv.Addr()).want(5, "svc/ok", "generation", "list")
	if strings.Contains(r.stderr, "\x1b") || strings.Contains(r.stderr, "\x9b") {
		t.Errorf("list wrote a stored control byte to standard error: %q", r.stderr)
	}
	if !strings.Contains(r.stderr, `\x1b[2J`) {
		t.Errorf("list said %q; want the stored bytes escaped", r.stderr)
	}
}

func TestEscapeLines(t *testing.T) {
	for in, want := range map[string]string{
		"plain\nsecond line\tand a tab": "plain\nsecond line\tand a tab",
		"csi \x9b2J and esc \x1b[2J":    `csi \x9b2J and esc \x1b[2J`,
		"c1 \u009b as UTF-8":            `c1 \u009b as UTF-8`,
		"ünïcödé stays":                 "ünïcödé stays",
	} {
		if got := escapeLines(in); got != want {
			t.Errorf("escapeLines(%q) = %q; want %q", in, got, want)
		}
	}
}
