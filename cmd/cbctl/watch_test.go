package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os/exec"
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
