package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/cbgrpc/cbgrpc/coordinator"
	cbredis "github.com/cbgrpc/cbgrpc/coordinator/redis"
	"github.com/cbgrpc/cbgrpc/internal/redistest"
)

// binary is the cbctl built for these tests.
var binary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "cbctl-test")
	if err != nil {
		panic(err)
	}
	binary = filepath.Join(dir, "cbctl")
	gocmd := filepath.Join(runtime.GOROOT(), "bin", "go")
	if out, err := exec.Command(gocmd, "build", "-o", binary, ".").CombinedOutput(); err != nil {
		os.RemoveAll(dir)
		panic("go build: " + err.Error() + "\n" + string(out))
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// cli runs the built cbctl with args and the given environment only.
type cli struct {
	t   *testing.T
	env []string
}

func newCLI(t *testing.T, addr string, env ...string) *cli {
	return &cli{t: t, env: append([]string{"CBCTL_REDIS_ADDR=" + addr, "CBCTL_BY=tester"}, env...)}
}

type ran struct {
	stdout, stderr string
	code           int
}

func (c *cli) run(args ...string) ran {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, args...)
	cmd.Env = c.env
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	r := ran{stdout: stdout.String(), stderr: stderr.String()}
	var exit *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &exit):
		r.code = exit.ExitCode()
	default:
		c.t.Fatalf("cbctl %q: %v", args, err)
	}
	return r
}

// want runs cbctl and checks its exit code, and that stdout and stderr
// contain the given texts ("" checks nothing, except that stderr is empty
// on success).
func (c *cli) want(code int, stdout, stderr string, args ...string) ran {
	c.t.Helper()
	r := c.run(args...)
	if r.code != code || !strings.Contains(r.stdout, stdout) || !strings.Contains(r.stderr, stderr) || (code == 0 && stderr == "" && r.stderr != "") {
		c.t.Errorf("cbctl %q: exit %d\nstdout:\n%s\nstderr:\n%s\nwant exit %d, stdout containing %q, stderr containing %q",
			args, r.code, r.stdout, r.stderr, code, stdout, stderr)
	}
	return r
}

// fleet is what the services do meanwhile: the library on the same Redis,
// with the default policy cbctl assumes.
type fleet struct {
	t *testing.T
	c *cbredis.Coordinator
	p coordinator.Policy
}

func (f *fleet) trip(scope string) {
	f.t.Helper()
	if res := f.report(scope, "", true, f.p.MinCalls); res.Transition == nil {
		f.t.Fatalf("tripping %q: %+v", scope, res)
	}
}

// report has replica record n outcomes for scope in its current
// generation, all failures or all successes.
func (f *fleet) report(scope, replica string, failure bool, n int) coordinator.Result {
	f.t.Helper()
	gen := f.admit(scope).Generation
	out := make([]coordinator.Outcome, n)
	for i := range out {
		out[i] = coordinator.Outcome{Generation: gen, Failure: failure}
	}
	res, err := f.c.Record(context.Background(), coordinator.RecordRequest{Scope: scope, Policy: f.p, Outcomes: out, Replica: replica})
	if err != nil {
		f.t.Fatalf("recording for %q: %v", scope, err)
	}
	return res
}

func (f *fleet) admit(scope string) coordinator.Decision {
	f.t.Helper()
	d, err := f.c.Admit(context.Background(), coordinator.AdmitRequest{Scope: scope, Policy: f.p, Claim: "claim"})
	if err != nil {
		f.t.Fatal(err)
	}
	return d
}

// generation is the generation scope is in now.
func (f *fleet) generation(scope string) uint64 {
	f.t.Helper()
	s, err := f.c.Snapshot(context.Background(), scope, f.p)
	if err != nil {
		f.t.Fatal(err)
	}
	return s.Generation
}

// wantChange runs cbctl, which must succeed, and checks that it printed
// line, with %d standing for the generation scope is in afterwards.
func (c *cli) wantChange(f *fleet, scope, line string, args ...string) {
	c.t.Helper()
	r := c.want(0, "", "", args...)
	if want := fmt.Sprintf(line, f.generation(scope)); !strings.Contains(r.stdout, want) {
		c.t.Errorf("cbctl %q printed:\n%s\nwant %q", args, r.stdout, want)
	}
}

func newFleet(t *testing.T, rdb goredis.UniversalClient) *fleet {
	return &fleet{t: t, c: cbredis.New(rdb), p: coordinator.DefaultPolicy()}
}

func TestCLI(t *testing.T) {
	srv := redistest.Start(t)
	f := newFleet(t, srv.Client(t))
	// The tripped scope stays open while cbctl runs a dozen times, however
	// loaded the machine.
	f.p.OpenFor, f.p.MaxOpenFor = time.Hour, 2*time.Hour
	c := newCLI(t, srv.Addr())

	r := c.want(0, "SCOPE", "", "list")
	if lines := strings.Split(strings.TrimSpace(r.stdout), "\n"); len(lines) != 1 {
		t.Errorf("list of nothing: %q; want the header alone", lines)
	}
	c.want(3, "", `cbctl: show: scope nowhere not found`, "show", "nowhere")

	f.trip("svc/pkg.S/Trip")
	fine := f.admit("svc/pkg.S/Fine").Generation
	if _, err := f.c.Record(context.Background(), coordinator.RecordRequest{Scope: "svc/pkg.S/Fine", Policy: f.p, Outcomes: []coordinator.Outcome{{Generation: fine}, {Generation: fine, Failure: true}}}); err != nil {
		t.Fatal(err)
	}

	// isolate
	c.want(2, "", "cbctl: isolate: --reason: invalid note: a reason is required to isolate a breaker", "isolate", "svc/pkg.S/Down")
	c.want(2, "", "cbctl: isolate: --reason: invalid note: a reason is required to isolate a breaker", "isolate", "svc/pkg.S/Down", "--reason", " ")
	c.want(2, "", "cbctl: disable: --reason: invalid note: a reason is required to disable a breaker", "disable", "svc/pkg.S/Down")
	c.want(2, "", "cbctl: isolate: --for: invalid note: For is -1s", "isolate", "svc/pkg.S/Down", "--reason", "x", "--for", "-1s")
	c.want(2, "", "want one SCOPE, got 0 arguments", "isolate", "--reason", "x")
	c.want(3, "", "cbctl: isolate: scope svc/pkg.S/Down not found", "isolate", "svc/pkg.S/Down", "--reason", "x")
	c.wantChange(f, "svc/pkg.S/Down", "closed -> isolated gen %d: isolated by alice for 1h0m0s: payments outage",
		"isolate", "svc/pkg.S/Down", "--for", "1h", "--reason", "payments outage", "--by", "alice", "--create")
	if d := f.admit("svc/pkg.S/Down"); d.Verdict != coordinator.Reject || d.State != coordinator.StateIsolated {
		t.Errorf("the fleet's Admit of the isolated scope: %+v; want Reject", d)
	}

	// list and show
	r = c.want(0, "", "", "list")
	rows := map[string][]string{}
	for _, line := range strings.Split(strings.TrimSpace(r.stdout), "\n")[1:] {
		fields := strings.Fields(line)
		rows[fields[0]] = fields
	}
	gen := func(scope string) string { return strconv.FormatUint(f.generation(scope), 10) }
	for scope, want := range map[string][]string{
		"svc/pkg.S/Down": {"isolated", gen("svc/pkg.S/Down"), "0", "0", "0"},
		"svc/pkg.S/Fine": {"closed", gen("svc/pkg.S/Fine"), "2", "1", "0", "-", "0", "0", "-"},
		"svc/pkg.S/Trip": {"open", gen("svc/pkg.S/Trip"), "0", "0", "0"},
	} {
		if got := rows[scope]; len(got) < len(want)+1 || strings.Join(got[1:len(want)+1], " ") != strings.Join(want, " ") {
			t.Errorf("list row of %s: %q; want it to start with %q\n%s", scope, got, want, r.stdout)
		}
	}
	if got := rows["svc/pkg.S/Down"]; !strings.HasSuffix(strings.Join(got, " "), "0 0 by alice: payments outage") {
		t.Errorf("list row of the isolated scope: %q; want its probes, outliers and note last", got)
	}
	r = c.want(0, "", "", "list", "--json")
	var list []snapshotJSON
	if err := json.Unmarshal([]byte(r.stdout), &list); err != nil {
		t.Fatalf("list --json: %v\n%s", err, r.stdout)
	}
	if len(list) != 3 || list[0].Scope != "svc/pkg.S/Down" || list[0].State != "isolated" ||
		list[0].Operator == nil || list[0].Operator.By != "alice" || list[0].Operator.For != "1h0m0s" || list[0].OpenUntil == "" {
		t.Errorf("list --json: %+v", list)
	}
	c.want(0, "state:                isolated", "", "show", "svc/pkg.S/Down")
	r = c.want(0, "", "", "show", "--json", "svc/pkg.S/Trip")
	var s snapshotJSON
	if err := json.Unmarshal([]byte(r.stdout), &s); err != nil || s.State != "open" || s.Generation != f.generation("svc/pkg.S/Trip") || s.OpenUntil == "" || s.Operator != nil {
		t.Errorf("show --json of the open scope: %+v, %v\n%s", s, err, r.stdout)
	}

	// release
	c.wantChange(f, "svc/pkg.S/Down", "isolated -> closed gen %d: released by tester: fixed", "release", "svc/pkg.S/Down", "--reason", "fixed")
	c.wantChange(f, "svc/pkg.S/Down", "unchanged: svc/pkg.S/Down is closed in generation %d", "release", "svc/pkg.S/Down")
	c.want(3, "", "cbctl: release: scope svc/pkg.S/Typo not found", "release", "svc/pkg.S/Typo")
	c.wantChange(f, "svc/pkg.S/Trip", "open -> closed gen %d: released by tester", "release", "svc/pkg.S/Trip")

	// disable and enable
	f.trip("svc/pkg.S/Trip")
	c.wantChange(f, "svc/pkg.S/Trip", "open -> disabled gen %d: disabled by tester: flapping", "disable", "--reason", "flapping", "svc/pkg.S/Trip")
	if d := f.admit("svc/pkg.S/Trip"); d.Verdict != coordinator.Allow || d.State != coordinator.StateDisabled {
		t.Errorf("the fleet's Admit of the disabled scope: %+v; want Allow", d)
	}
	c.want(2, "", "cbctl: disable: flag provided but not defined: --for", "disable", "svc/pkg.S/Trip", "--reason", "x", "--for", "1s")
	r = c.want(0, "", "", "enable", "svc/pkg.S/Trip", "--json")
	var res resultJSON
	if err := json.Unmarshal([]byte(r.stdout), &res); err != nil || !res.Changed || res.State != "closed" || res.Transition == nil ||
		res.Transition.From != "disabled" || res.Transition.Reason != "enabled by tester" || res.Replicas != (replicasJSON{}) {
		t.Errorf("enable --json: %+v, %v\n%s", res, err, r.stdout)
	}
	r = c.want(0, "", "", "enable", "svc/pkg.S/Trip", "--json")
	if err := json.Unmarshal([]byte(r.stdout), &res); err != nil || res.Changed || res.Transition != nil {
		t.Errorf("enable --json again: %+v, %v\n%s", res, err, r.stdout)
	}

	// odd scopes: quoted in tables, "--" for one that starts with a dash
	c.wantChange(f, "-dash scope", "closed -> isolated gen %d", "isolate", "--reason", "odd", "--create", "--", "-dash scope")
	if r := c.want(0, `"-dash scope" `, "", "list"); !strings.Contains(strings.Join(strings.Fields(r.stdout), " "), `"-dash scope" isolated `+gen("-dash scope")) {
		t.Errorf("list: want the dash scope quoted and isolated:\n%s", r.stdout)
	}

	// usage and operational errors
	c.want(2, "", `cbctl: unknown command "lsit"`, "lsit")
	c.want(2, "", "cbctl: list: flag provided but not defined: --nope", "list", "--nope")
	c.want(2, "", "cbctl: list: list takes no argument", "list", "extra")
	c.want(2, "", "cbctl: list: --window 1ms --buckets 10", "list", "--window", "1ms")
	c.want(0, "usage: cbctl show [flags] SCOPE", "", "show", "--help")
	c.want(1, "", "cbctl: list: redis coordinator: list: ", "list", "--addr", "127.0.0.1:1")
}

// The username and password come from the environment.
func TestCLIAuth(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	if err := rdb.Do(ctx, "ACL", "SETUSER", "ops", "on", ">s3cret", "~*", "&*", "+@all").Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.Do(ctx, "ACL", "SETUSER", "default", "off").Err(); err != nil {
		t.Fatal(err)
	}
	newCLI(t, srv.Addr()).want(1, "", "cbctl: list: ", "list")
	newCLI(t, srv.Addr(), "CBCTL_REDIS_USERNAME=ops", "CBCTL_REDIS_PASSWORD=wrong").want(1, "", "WRONGPASS", "list")
	c := newCLI(t, srv.Addr(), "CBCTL_REDIS_USERNAME=ops", "CBCTL_REDIS_PASSWORD=s3cret")
	c.want(0, "closed -> isolated", "", "isolate", "s", "--reason", "auth", "--create")
	c.want(0, "by tester: auth", "", "list")
}

func TestCLICluster(t *testing.T) {
	cl := redistest.StartCluster(t)
	f := newFleet(t, cl.Client(t))
	c := newCLI(t, strings.Join(cl.Addrs(), ","))
	c.want(2, "", "--cluster for seeds", "list")
	scopes := []string{"a/x", "b/y", "c/z", "d/w", "e/v", "f/u"}
	for _, s := range scopes {
		f.trip(s)
	}
	c.wantChange(f, "c/z", "open -> isolated gen %d", "isolate", "--cluster", "c/z", "--reason", "cluster")
	r := c.want(0, "", "", "list", "--cluster", "--json")
	var list []snapshotJSON
	if err := json.Unmarshal([]byte(r.stdout), &list); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, s := range list {
		got = append(got, s.Scope+"="+s.State)
	}
	if strings.Join(got, " ") != "a/x=open b/y=open c/z=isolated d/w=open e/v=open f/u=open" {
		t.Errorf("list --cluster: %v", got)
	}
}

// watch prints transitions as they happen, of the scopes it lists at the
// start, and ends cleanly on SIGINT.
func TestCLIWatch(t *testing.T) {
	srv := redistest.Start(t)
	f := newFleet(t, srv.Client(t))
	f.trip("svc/watched")
	cmd := exec.Command(binary, "watch", "--json")
	cmd.Env = []string{"CBCTL_REDIS_ADDR=" + srv.Addr()}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	errLines := bufio.NewScanner(stderr)
	if !errLines.Scan() || errLines.Text() != "cbctl: watch: following 1 scopes" {
		t.Fatalf("watch said %q, %v; want it following 1 scope", errLines.Text(), errLines.Err())
	}
	go func() {
		for errLines.Scan() {
			t.Logf("watch stderr: %s", errLines.Text())
		}
	}()

	ctx := context.Background()
	isolated, err := f.c.Isolate(ctx, coordinator.CommandRequest{Scope: "svc/watched", Policy: f.p, Note: coordinator.Note{By: "alice", Reason: "watching"}})
	if err != nil {
		t.Fatal(err)
	}
	released, err := f.c.Release(ctx, coordinator.CommandRequest{Scope: "svc/watched", Policy: f.p, Note: coordinator.Note{}})
	if err != nil {
		t.Fatal(err)
	}
	lines := make(chan string)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	for _, want := range []transitionJSON{
		{Scope: "svc/watched", From: "open", To: "isolated", Generation: isolated.Generation, Reason: "isolated by alice: watching"},
		{Scope: "svc/watched", From: "isolated", To: "closed", Generation: released.Generation, Reason: "released"},
	} {
		select {
		case line := <-lines:
			var got transitionJSON
			if err := json.Unmarshal([]byte(line), &got); err != nil {
				t.Fatalf("watch printed %q: %v", line, err)
			}
			if _, err := time.Parse(timeFormat, got.At); err != nil {
				t.Errorf("watch: at %q: %v", got.At, err)
			}
			got.At = ""
			if got != want {
				t.Errorf("watch printed %+v; want %+v", got, want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("watch printed nothing for %+v", want)
		}
	}
	cmd.Process.Signal(syscall.SIGINT)
	if err := cmd.Wait(); err != nil {
		t.Errorf("watch after SIGINT: %v; want exit 0", err)
	}
}

// TestCLIShowLastTrip: show of a tripped breaker says why it opened, the
// window at the trip and when, in text and JSON, though the trip emptied
// the window.
func TestCLIShowLastTrip(t *testing.T) {
	srv := redistest.Start(t)
	f := newFleet(t, srv.Client(t))
	c := newCLI(t, srv.Addr())
	scope := "pay/Charge"
	f.trip(scope)
	gen := f.generation(scope)
	// MinCalls failures in a row: the run rule, checked first, holds as
	// soon as the ratio would.
	reason := fmt.Sprintf("consecutive failures %d >= %d", f.p.ConsecutiveFailures, f.p.ConsecutiveFailures)
	r := c.want(0, "calls:                0", "", "show", scope)
	for _, want := range []string{fmt.Sprintf("gen %d: %s", gen, reason), fmt.Sprintf("window at the trip:   %d calls, %d failures, 0 slow", f.p.MinCalls, f.p.MinCalls)} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("cbctl show printed:\n%s\nwant %q", r.stdout, want)
		}
	}
	r = c.want(0, `"last_trip": {`, "", "show", scope, "--json")
	var out struct {
		LastTrip struct {
			Reason     string `json:"reason"`
			Generation uint64 `json:"generation"`
			Calls      int    `json:"calls"`
			Failures   int    `json:"failures"`
			At         string `json:"at"`
		} `json:"last_trip"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &out); err != nil {
		t.Fatal(err)
	}
	if lt := out.LastTrip; lt.Reason != reason || lt.Generation != gen || lt.Calls != f.p.MinCalls || lt.Failures != f.p.MinCalls || lt.At == "" {
		t.Errorf("show --json last trip %+v; want %q in generation %d at %d of %d", lt, reason, gen, f.p.MinCalls, f.p.MinCalls)
	}
}

// TestCLIShowSaysATripWasByStalls: calls reported while they still ran
// trip the breaker as failures do, and show's last trip says how many of
// them stalled.
func TestCLIShowSaysATripWasByStalls(t *testing.T) {
	srv := redistest.Start(t)
	f := newFleet(t, srv.Client(t))
	c := newCLI(t, srv.Addr())
	scope := "hung/Get"
	gen := f.admit(scope).Generation
	out := make([]coordinator.Outcome, f.p.MinCalls)
	for i := range out {
		out[i] = coordinator.Outcome{Generation: gen, Stalled: true}
	}
	res, err := f.c.Record(context.Background(), coordinator.RecordRequest{Scope: scope, Policy: f.p, Outcomes: out})
	if err != nil {
		t.Fatal(err)
	}
	if res.Transition == nil {
		t.Fatalf("%d stalled calls did not trip %q: %+v", f.p.MinCalls, scope, res)
	}
	n := f.p.ConsecutiveFailures
	reason := fmt.Sprintf("consecutive failures %d >= %d, %d stalled", n, n, n)
	c.want(0, fmt.Sprintf("gen %d: %s", f.generation(scope), reason), "", "show", scope)
	// JSON escapes the reason's ">".
	c.want(0, fmt.Sprintf(", %d stalled\",", n), "", "show", scope, "--json")
}

// TestCLIShowCountsBesideTheCalls: the requests adaptive throttling
// rejected are in the window beside the calls, and the calls dry-run
// replicas would have rejected are counted in the generation; show says
// how many, the second only when there are some.
func TestCLIShowCountsBesideTheCalls(t *testing.T) {
	srv := redistest.Start(t)
	f := newFleet(t, srv.Client(t))
	c := newCLI(t, srv.Addr())
	for _, tc := range []struct {
		scope      string
		mark       func(*coordinator.Outcome)
		text, json string
	}{
		{"quota/Get", func(o *coordinator.Outcome) { o.Throttled = true }, "throttled:            2", `"throttled": 2`},
		{"dry/Get", func(o *coordinator.Outcome) { o.WouldReject = true }, "dry runs would reject: 2", `"would_reject": 2`},
	} {
		gen := f.admit(tc.scope).Generation
		if r := c.want(0, "calls:", "", "show", tc.scope); strings.Contains(r.stdout, "would reject") {
			t.Errorf("show of a scope no dry run reported on:\n%s", r.stdout)
		}
		out := []coordinator.Outcome{{Generation: gen}, {Generation: gen}, {Generation: gen}}
		tc.mark(&out[1])
		tc.mark(&out[2])
		if _, err := f.c.Record(context.Background(), coordinator.RecordRequest{Scope: tc.scope, Policy: f.p, Outcomes: out}); err != nil {
			t.Fatal(err)
		}
		c.want(0, tc.text, "", "show", tc.scope)
		c.want(0, tc.json, "", "show", tc.scope, "--json")
		c.want(0, `"calls": 1`, "", "show", tc.scope, "--json")
	}
}

// TestCLIShowsOutliers: show and list say which replicas of a scope the
// coordinator found failing alone, since when and why; the fleet's
// breaker stays closed.
func TestCLIShowsOutliers(t *testing.T) {
	srv := redistest.Start(t)
	f := newFleet(t, srv.Client(t))
	c := newCLI(t, srv.Addr())
	scope := "ledger/Post"
	f.report(scope, "pod-a", false, 5)
	f.report(scope, "pod-b", true, f.p.ConsecutiveFailures)
	reason := fmt.Sprintf("consecutive failures %d >= %d", f.p.ConsecutiveFailures, f.p.ConsecutiveFailures)
	r := c.want(0, "outliers:             1", "", "show", scope)
	if !strings.Contains(r.stdout, "outlier:              pod-b since ") || !strings.Contains(r.stdout, ": "+reason) {
		t.Errorf("cbctl show printed:\n%s\nwant pod-b as an outlier, for %q", r.stdout, reason)
	}
	c.want(0, "closed", "", "show", scope)
	r = c.want(0, `"replica": "pod-b"`, "", "show", scope, "--json")
	var out struct {
		State    string `json:"state"`
		Outliers []struct {
			Replica, Since, Until, Reason string
		} `json:"outliers"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &out); err != nil {
		t.Fatal(err)
	}
	if out.State != "closed" || len(out.Outliers) != 1 || out.Outliers[0].Reason != reason || out.Outliers[0].Since == "" || out.Outliers[0].Until == "" {
		t.Errorf("show --json: %+v; want closed, with pod-b an outlier", out)
	}
	r = c.want(0, "OUTLIERS", "", "list")
	if !strings.Contains(r.stdout, scope) {
		t.Errorf("cbctl list printed:\n%s\nwant %s", r.stdout, scope)
	}
}
