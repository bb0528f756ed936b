package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cbgrpc/cbgrpc/coordinator"
	"github.com/cbgrpc/cbgrpc/internal/redistest"
)

// watching is a running cbctl watch and the lines it prints.
type watching struct {
	t              *testing.T
	cmd            *exec.Cmd
	stdout, stderr chan string
	said           []string // stderr lines read so far
	printed        []string // stdout lines read so far
}

func startWatch(t *testing.T, addr string, args ...string) *watching {
	t.Helper()
	cmd := exec.Command(binary, append([]string{"watch"}, args...)...)
	cmd.Env = []string{"CBCTL_REDIS_ADDR=" + addr}
	w := &watching{t: t, cmd: cmd, stdout: lines(t, cmd.StdoutPipe), stderr: lines(t, cmd.StderrPipe)}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	return w
}

func lines(t *testing.T, pipe func() (io.ReadCloser, error)) chan string {
	r, err := pipe()
	if err != nil {
		t.Fatal(err)
	}
	ch := make(chan string, 100)
	go func() {
		defer close(ch)
		for sc := bufio.NewScanner(r); sc.Scan(); {
			ch <- sc.Text()
		}
	}()
	return ch
}

// waitSaid reads standard error until a line holds want.
func (w *watching) waitSaid(want string) {
	w.t.Helper()
	deadline := time.After(20 * time.Second)
	for {
		select {
		case line, ok := <-w.stderr:
			if !ok {
				w.t.Fatalf("watch ended; said %q, want a line with %q", w.said, want)
			}
			w.said = append(w.said, line)
			if strings.Contains(line, want) {
				return
			}
		case <-deadline:
			w.t.Fatalf("watch said %q; want a line with %q", w.said, want)
		}
	}
}

// TestCLIWatchRidesOutAPausedRedis: a Redis that stops answering for 1.5s
// (SIGSTOP) loses watch its feed; watch says so once, reconnects once the
// server resumes, and goes on printing transitions.
func TestCLIWatchRidesOutAPausedRedis(t *testing.T) {
	srv := redistest.Start(t)
	f := newFleet(t, srv.Client(t))
	f.trip("svc/watched")
	w := startWatch(t, srv.Addr(), "--json")
	w.waitSaid("following 1 scopes")
	srv.Pause()
	time.Sleep(1500 * time.Millisecond) // the fault: a server that answers nothing for this long
	srv.Resume()
	w.waitSaid("reconnecting")
	w.waitSaid("reconnected, following 1 scopes")

	isolated, err := f.c.Isolate(context.Background(), coordinator.CommandRequest{Scope: "svc/watched", Policy: f.p, Note: coordinator.Note{By: "alice", Reason: "after the pause"}})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case line := <-w.stdout:
		var got transitionJSON
		if err := json.Unmarshal([]byte(line), &got); err != nil {
			t.Fatalf("watch printed %q: %v", line, err)
		}
		if got.Scope != "svc/watched" || got.To != "isolated" || got.Generation != isolated.Generation {
			t.Errorf("watch printed %+v; want the isolation of svc/watched, generation %d", got, isolated.Generation)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("watch printed no transition after the pause; it said %q", w.said)
	}
	w.cmd.Process.Signal(syscall.SIGINT)
	for line := range w.stderr {
		w.said = append(w.said, line)
	}
	if err := w.cmd.Wait(); err != nil {
		t.Errorf("watch after SIGINT: %v; want exit 0", err)
	}
	if n := strings.Count(strings.Join(w.said, "\n"), "reconnecting"); n != 1 {
		t.Errorf("watch said %q; want the lost feed said once", w.said)
	}
}

// TestCLIWatchEndsOnRefusedAuthentication: a feed lost to a server that
// then refuses the connection (its password changed) is no blip: watch
// ends with exit status 1, saying why.
func TestCLIWatchEndsOnRefusedAuthentication(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	f := newFleet(t, rdb)
	f.trip("svc/watched")
	w := startWatch(t, srv.Addr())
	w.waitSaid("following 1 scopes")
	ctx := context.Background()
	if err := rdb.ConfigSet(ctx, "requirepass", "changed").Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.Do(ctx, "CLIENT", "KILL", "TYPE", "pubsub").Err(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		for line := range w.stderr {
			w.said = append(w.said, line)
		}
		done <- w.cmd.Wait()
	}()
	select {
	case err := <-done:
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != exitError {
			t.Errorf("watch refused by the server: %v; want exit status 1", err)
		}
		if said := strings.Join(w.said, "\n"); !strings.Contains(said, "NOAUTH") && !strings.Contains(said, "WRONGPASS") {
			t.Errorf("watch said %q; want the refusal named", w.said)
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("watch still runs 20s after the server refused it; it said %q", w.said)
	}
}

// cause is the traceparent the scenes keep as the cause of each
// transition, as a Breaker that traces does (coordinator.CauseKeeper):
// the feed then carries the transition a second time.
const cause = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"

// scene is what the fleet does while watch runs: the transitions it
// makes, each of which watch must print once.
type scene struct {
	t    *testing.T
	f    *fleet
	made []coordinator.Transition
}

// did checks that an operation made a transition, and notes it.
func (s *scene) did(what, scope string, res coordinator.Result, err error, quiet bool) {
	s.t.Helper()
	if err != nil || res.Transition == nil {
		s.t.Fatalf("%s %s: %+v, %v; want a transition", what, scope, res, err)
	}
	s.noted(*res.Transition, quiet)
}

// noted notes tr and keeps its cause, unless quiet.
func (s *scene) noted(tr coordinator.Transition, quiet bool) {
	s.t.Helper()
	s.made = append(s.made, tr)
	if quiet {
		return
	}
	q := coordinator.CauseRequest{Scope: tr.Scope, Generation: tr.Generation, State: tr.To, Cause: cause}
	if kept, err := s.f.c.KeepCause(context.Background(), q); !kept || err != nil {
		s.t.Fatalf("keeping the cause of %+v: %v, %v", tr, kept, err)
	}
}

func (s *scene) trip(scope string) {
	s.t.Helper()
	s.did("tripping", scope, s.f.report(scope, "", true, s.f.p.MinCalls), nil, false)
}

func (s *scene) command(op func(context.Context, coordinator.CommandRequest) (coordinator.Result, error), what, scope string, quiet bool) {
	s.t.Helper()
	res, err := op(context.Background(), coordinator.CommandRequest{Scope: scope, Policy: s.f.p, Note: coordinator.Note{By: "scene", Reason: what}})
	s.did(what, scope, res, err, quiet)
}

func (s *scene) release(scope string) {
	s.t.Helper()
	s.command(s.f.c.Release, "release", scope, false)
}

func (s *scene) isolate(scope string) {
	s.t.Helper()
	s.command(s.f.c.Isolate, "isolate", scope, false)
}

// recover waits for the open period of scope to end, then probes it:
// half-open, then closed.
func (s *scene) recover(scope string) {
	s.t.Helper()
	ctx := context.Background()
	deadline := time.Now().Add(30 * time.Second)
	for {
		d, err := s.f.c.Admit(ctx, coordinator.AdmitRequest{Scope: scope, Policy: s.f.p, Claim: "probe"})
		if err != nil {
			s.t.Fatal(err)
		}
		if d.Verdict == coordinator.Probe {
			if d.Transition == nil {
				s.t.Fatalf("the probe of %s: %+v; want open -> half-open", scope, d)
			}
			s.noted(*d.Transition, false)
			res, err := s.f.c.Settle(ctx, coordinator.SettleRequest{Scope: scope, Policy: s.f.p, Claim: "probe", Outcome: coordinator.Outcome{Generation: d.Generation}})
			s.did("settling the probe of", scope, res, err, false)
			return
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("%s gives no probe 30s after it opened: %+v", scope, d)
		}
		time.Sleep(10 * time.Millisecond) // polling: the open period ends by the server's clock
	}
}

// lineOf is t as watch prints it.
func lineOf(asJSON bool, t coordinator.Transition) string {
	if !asJSON {
		return transitionLine(t)
	}
	b, err := json.Marshal(toTransitionJSON(t))
	if err != nil {
		panic(err)
	}
	return string(b)
}

// waitPrinted reads standard output until every line of want came.
func (w *watching) waitPrinted(want ...string) {
	w.t.Helper()
	for _, line := range want {
		w.waitPrintedLike(func(got string) bool { return got == line })
	}
}

// stop interrupts watch and reads what it printed and said until it ends.
func (w *watching) stop() {
	w.t.Helper()
	w.cmd.Process.Signal(syscall.SIGINT)
	for line := range w.stdout {
		w.printed = append(w.printed, line)
	}
	for line := range w.stderr {
		w.said = append(w.said, line)
	}
	if err := w.cmd.Wait(); err != nil {
		w.t.Errorf("watch after SIGINT: %v; want exit 0; it said %q", err, w.said)
	}
}

// TestCLIWatchTellsEachTransitionOnce: 48 transitions of seven scopes,
// each kept with its cause as a Breaker that traces does, so that the
// feed carries every one twice, across several rescans: watch prints
// each once, in the order each scope made them, including those of the
// scopes born after it started (listed: the first transitions of each of
// them, made before a rescan follows it, caught up from its state).
func TestCLIWatchTellsEachTransitionOnce(t *testing.T) {
	for _, tc := range []struct {
		name   string
		json   bool
		listed bool // no SCOPE arguments: watch lists the scopes
	}{
		{"listed", false, true},
		{"listed, JSON", true, true},
		{"given", false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := redistest.Start(t)
			f := newFleet(t, srv.Client(t))
			f.p.OpenFor, f.p.ProbeSuccesses = 50*time.Millisecond, 1
			s := &scene{t: t, f: f}
			old := []string{"s/a", "s/b", "s/c", "s/half"}
			young := []string{"n/trip", "n/isolated", "n/moved"}
			for _, scope := range old {
				f.admit(scope)
			}
			args := []string{"--rescan", "300ms"}
			if tc.json {
				args = append(args, "--json")
			}
			followed := len(old)
			if !tc.listed {
				args = append(append(args, old...), young...)
				followed += len(young)
			}
			w := startWatch(t, srv.Addr(), args...)
			w.waitSaid(fmt.Sprintf("following %d scopes", followed))
			// waitFor waits for the lines of the last n transitions.
			waitFor := func(n int) {
				t.Helper()
				var want []string
				for _, tr := range s.made[len(s.made)-n:] {
					want = append(want, lineOf(tc.json, tr))
				}
				w.waitPrinted(want...)
			}
			rounds := func() {
				for _, scope := range old[:3] {
					s.trip(scope)
					s.release(scope)
				}
			}

			rounds()
			s.trip("s/half")
			s.recover("s/half")
			// Born after watch started: a trip, an isolation made with the
			// birth, and two transitions before any rescan may follow.
			s.trip("n/trip")
			waitFor(1)
			s.isolate("n/isolated")
			waitFor(1)
			s.trip("n/moved")
			s.release("n/moved")
			waitFor(2)
			rounds()
			s.release("n/trip")
			s.trip("n/trip")
			s.release("n/trip")
			s.release("n/isolated")
			s.trip("s/half")
			s.recover("s/half")
			rounds()
			s.trip("n/moved")
			s.release("n/moved")
			rounds()
			s.isolate("n/isolated")
			s.release("n/isolated")
			s.trip("n/trip")
			s.release("n/trip")
			s.trip("s/half")
			s.recover("s/half")
			// The last, with no cause kept: the feed carries nothing after
			// it, and on one connection, in the order published.
			s.command(f.c.Isolate, "isolate", "s/a", true)
			if len(s.made) != 48 {
				t.Fatalf("the scene made %d transitions; want 48", len(s.made))
			}
			waitFor(1)
			if tc.listed {
				// A rescan after the last line: it prints nothing.
				f.admit("z/born")
				w.waitSaid("following new scope z/born")
			}
			w.stop()
			wantPrinted(t, w.printed, s.made, tc.json)
			for _, scope := range young {
				n := 0
				for _, line := range w.said {
					if line == "cbctl: watch: following new scope "+scope {
						n++
					}
				}
				if tc.listed && n != 1 || !tc.listed && n != 0 {
					t.Errorf("watch said %q; want it to follow %s as a new scope once when it lists, else never", w.said, scope)
				}
			}
		})
	}
}

// wantPrinted checks that watch printed the line of every transition
// made once, and no other, in the order each scope made them.
func wantPrinted(t *testing.T, printed []string, made []coordinator.Transition, asJSON bool) {
	t.Helper()
	index := map[string]int{}
	for i, tr := range made {
		index[lineOf(asJSON, tr)] = i
	}
	seen := map[string]bool{}
	last := map[string]int{} // by scope, the index in made of the last line printed
	var wrong []string
	for _, line := range printed {
		i, ok := index[line]
		switch {
		case !ok:
			wrong = append(wrong, "unexpected: "+line)
			continue
		case seen[line]:
			wrong = append(wrong, "again: "+line)
		}
		if j, ok := last[made[i].Scope]; ok && j > i {
			wrong = append(wrong, "out of order: "+line)
		}
		seen[line], last[made[i].Scope] = true, i
	}
	for _, tr := range made {
		if line := lineOf(asJSON, tr); !seen[line] {
			wrong = append(wrong, "missing: "+line)
		}
	}
	if len(wrong) > 0 || len(printed) != len(made) {
		t.Errorf("watch printed %d lines for %d transitions:\n%s\nall it printed:\n%s", len(printed), len(made), strings.Join(wrong, "\n"), strings.Join(printed, "\n"))
	}
}

// TestCLIWatchShowsOutlierSpells: the feed does not carry a replica's
// outlier spell, so watch prints what each rescan finds: the spell's start
// as the coordinator told the replica, and its end, when a rescan no
// longer finds it, at that rescan's time.
func TestCLIWatchShowsOutlierSpells(t *testing.T) {
	for _, asJSON := range []bool{false, true} {
		t.Run(fmt.Sprintf("json=%v", asJSON), func(t *testing.T) {
			srv := redistest.Start(t)
			f := newFleet(t, srv.Client(t))
			f.p.OpenFor = 50 * time.Millisecond
			const scope = "ledger/Post"
			f.report(scope, "pod-a", false, 5)
			args := []string{"--rescan", "200ms"}
			if asJSON {
				args = append(args, "--json")
			}
			w := startWatch(t, srv.Addr(), args...)
			w.waitSaid("following 1 scopes")

			res := f.report(scope, "pod-b", true, f.p.ConsecutiveFailures)
			if res.Outlier == nil || res.Transition == nil || res.Transition.Replica != "pod-b" {
				t.Fatalf("pod-b failing alone: %+v; want an outlier", res)
			}
			w.waitPrinted(lineOf(asJSON, *res.Transition))
			gen := res.Transition.Generation
			probeOutlier(t, f, scope, "pod-b", gen)
			end := coordinator.Transition{Scope: scope, Replica: "pod-b", From: coordinator.StateOpen, To: coordinator.StateClosed,
				Generation: gen, Reason: "no longer an outlier"}
			w.waitPrintedLike(func(line string) bool { return sameBut(asJSON, line, end) })
			// A rescan after the last line: it prints nothing.
			f.admit("z/born")
			w.waitSaid("following new scope z/born")
			w.stop()
			if len(w.printed) != 2 {
				t.Errorf("watch printed %q; want the start and the end of pod-b's spell alone", w.printed)
			}
		})
	}
}

// probeOutlier sends the probe of replica, a success, until its period is
// over and the probe ends its spell.
func probeOutlier(t *testing.T, f *fleet, scope, replica string, gen uint64) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		res, err := f.c.Record(context.Background(), coordinator.RecordRequest{Scope: scope, Policy: f.p, Replica: replica,
			Outcomes: []coordinator.Outcome{{Generation: gen, Probe: true}}})
		if err != nil {
			t.Fatal(err)
		}
		if tr := res.Transition; tr != nil && tr.Replica == replica && tr.To == coordinator.StateClosed {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the probe of %s: %+v 30s on; want its spell over", replica, res)
		}
		time.Sleep(10 * time.Millisecond) // polling: the period ends by the server's clock
	}
}

// sameBut reports whether line prints want, whatever its time.
func sameBut(asJSON bool, line string, want coordinator.Transition) bool {
	if !asJSON {
		_, rest, _ := strings.Cut(line, " ")
		_, wantRest, _ := strings.Cut(transitionLine(want), " ")
		return rest == wantRest
	}
	var got transitionJSON
	if json.Unmarshal([]byte(line), &got) != nil || got.At == "" {
		return false
	}
	got.At = ""
	return got == toTransitionJSON(want)
}

// waitPrintedLike reads standard output until a line matches.
func (w *watching) waitPrintedLike(match func(string) bool) {
	w.t.Helper()
	if slices.ContainsFunc(w.printed, match) {
		return
	}
	deadline := time.After(60 * time.Second)
	for {
		select {
		case line, ok := <-w.stdout:
			if !ok {
				w.t.Fatalf("watch ended; printed %q", w.printed)
			}
			w.printed = append(w.printed, line)
			if match(line) {
				return
			}
		case <-deadline:
			w.t.Fatalf("watch printed %q; want another line", w.printed)
		}
	}
}

// TestCLIWatchCatchesUpOnACluster: on a Redis Cluster, where the feed is
// sharded and no pattern hears every scope, scopes born on every master
// after watch started are caught up at a rescan, and what they do after
// is on the feed: each transition printed once.
func TestCLIWatchCatchesUpOnACluster(t *testing.T) {
	cl := redistest.StartCluster(t)
	f := newFleet(t, cl.Client(t))
	s := &scene{t: t, f: f}
	w := startWatch(t, strings.Join(cl.Addrs(), ","), "--cluster", "--rescan", "300ms")
	w.waitSaid("following 0 scopes")
	scopes := []string{"a/x", "b/y", "c/z", "d/w", "e/v", "f/u"}
	for _, scope := range scopes {
		s.trip(scope)
	}
	for _, scope := range scopes {
		// Without its cause: nothing of the scope follows on the feed.
		s.command(f.c.Release, "release", scope, true)
	}
	for _, tr := range s.made {
		w.waitPrinted(lineOf(false, tr))
	}
	f.admit("z/born")
	w.waitSaid("following new scope z/born")
	w.stop()
	wantPrinted(t, w.printed, s.made, false)
}

// TestCLIWatchCatchesUpWhenItReconnects: a scope born while watch does
// not follow it (never rescanning here) is caught up when a lost feed is
// followed again: its trip printed once, and what follows from the feed.
func TestCLIWatchCatchesUpWhenItReconnects(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	f := newFleet(t, rdb)
	s := &scene{t: t, f: f}
	f.admit("s/old")
	w := startWatch(t, srv.Addr(), "--rescan", "0")
	w.waitSaid("following 1 scopes")
	s.trip("n/new")
	s.trip("s/old")
	w.waitPrinted(lineOf(false, s.made[1]))
	if err := rdb.Do(context.Background(), "CLIENT", "KILL", "TYPE", "pubsub").Err(); err != nil {
		t.Fatal(err)
	}
	w.waitSaid("reconnected, following 2 scopes")
	w.waitSaid("following new scope n/new")
	s.command(f.c.Release, "release", "n/new", true)
	w.waitPrinted(lineOf(false, s.made[0]), lineOf(false, s.made[2]))
	w.stop()
	wantPrinted(t, w.printed, s.made, false)
}
