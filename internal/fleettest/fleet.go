package fleettest

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/cbgrpc/cbgrpc/internal/cbfleet"
)

// Build compiles the replica program into dir and returns its path. Tests
// build it once, in TestMain, and start it many times.
func Build(dir string) (string, error) {
	bin := filepath.Join(dir, "cbfleet")
	cmd := exec.Command("go", "build", "-o", bin, "github.com/cbgrpc/cbgrpc/internal/cmd/cbfleet")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build cbfleet: %v\n%s", err, out)
	}
	return bin, nil
}

// readyTimeout bounds how long a replica may take to start.
const readyTimeout = 15 * time.Second

// Replica is one running cbfleet process.
type Replica struct {
	ID  int
	t   testing.TB
	cmd *exec.Cmd
	in  io.WriteCloser

	mu     sync.Mutex
	last   cbfleet.Report
	phases []cbfleet.Report // the "phase" reports, in order
	closed *cbfleet.Report
	stderr bytes.Buffer
	exited chan struct{}
	err    error // how the process exited
}

// Fleet is replicas started together.
type Fleet []*Replica

// Start starts one replica per config, waits until each has reported
// ready, and kills every one still running at the end of the test.
func Start(t testing.TB, bin string, cfgs ...cbfleet.Config) Fleet {
	t.Helper()
	f := make(Fleet, len(cfgs))
	for i, cfg := range cfgs {
		f[i] = start(t, bin, cfg)
	}
	for _, r := range f {
		r.WaitFor(t, "ready", readyTimeout, func(rep cbfleet.Report) bool { return rep.Event != "" })
	}
	return f
}

func start(t testing.TB, bin string, cfg cbfleet.Config) *Replica {
	t.Helper()
	r := &Replica{ID: cfg.ID, t: t, exited: make(chan struct{})}
	r.cmd = exec.Command(bin, cfg.Args()...)
	r.cmd.Stderr = &lockedWriter{mu: &r.mu, w: &r.stderr}
	out, err := r.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if r.in, err = r.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	if err := r.cmd.Start(); err != nil {
		t.Fatalf("start replica %d: %v", cfg.ID, err)
	}
	read := make(chan struct{})
	go func() {
		defer close(read)
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			var rep cbfleet.Report
			if err := json.Unmarshal(sc.Bytes(), &rep); err != nil {
				r.mu.Lock()
				fmt.Fprintf(&r.stderr, "unreadable report %q: %v\n", sc.Text(), err)
				r.mu.Unlock()
				continue
			}
			r.mu.Lock()
			r.last = rep
			switch rep.Event {
			case "phase":
				r.phases = append(r.phases, rep)
			case "closed":
				r.closed = &rep
			}
			r.mu.Unlock()
		}
	}()
	go func() {
		<-read
		err := r.cmd.Wait()
		r.mu.Lock()
		r.err = err
		r.mu.Unlock()
		close(r.exited)
	}()
	t.Cleanup(r.Kill)
	return r
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// Send writes a command line (see package cbfleet) to the replica.
func (r *Replica) Send(cmd string) {
	r.t.Helper()
	if _, err := io.WriteString(r.in, cmd+"\n"); err != nil {
		r.t.Fatalf("replica %d: send %q: %v%s", r.ID, cmd, err, r.diag())
	}
}

// Last returns the latest report.
func (r *Replica) Last() cbfleet.Report {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.last
}

// Alive reports whether the process is still running.
func (r *Replica) Alive() bool {
	select {
	case <-r.exited:
		return false
	default:
		return true
	}
}

// diag is what the test log needs when a replica misbehaves.
func (r *Replica) diag() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	last, _ := json.Marshal(r.last)
	msg := fmt.Sprintf("\n  last report: %s", last)
	if r.stderr.Len() > 0 {
		msg += "\n  stderr: " + r.stderr.String()
	}
	if r.err != nil {
		msg += fmt.Sprintf("\n  exit: %v", r.err)
	}
	return msg
}

// WaitFor polls the latest report until ok holds or timeout passes, and
// returns it.
func (r *Replica) WaitFor(t testing.TB, what string, timeout time.Duration, ok func(cbfleet.Report) bool) cbfleet.Report {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		rep := r.Last()
		if ok(rep) {
			return rep
		}
		if !r.Alive() {
			t.Fatalf("replica %d exited while waiting for %s%s", r.ID, what, r.diag())
		}
		if time.Now().After(deadline) {
			t.Fatalf("replica %d: no %s within %v%s", r.ID, what, timeout, r.diag())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Phase ends the replica's current phase, starts one named next and
// returns the report of the phase that ended.
func (r *Replica) Phase(next string) cbfleet.Report {
	r.t.Helper()
	return r.awaitPhase(r.sendPhase(next))
}

// sendPhase asks for a new phase and returns how many phases had ended
// before.
func (r *Replica) sendPhase(next string) int {
	r.t.Helper()
	r.mu.Lock()
	n := len(r.phases)
	r.mu.Unlock()
	r.Send("phase " + next)
	return n
}

func (r *Replica) awaitPhase(n int) cbfleet.Report {
	r.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		r.mu.Lock()
		if len(r.phases) > n {
			rep := r.phases[n]
			r.mu.Unlock()
			return rep
		}
		r.mu.Unlock()
		if !r.Alive() || time.Now().After(deadline) {
			r.t.Fatalf("replica %d: no report of the phase ending%s", r.ID, r.diag())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Quit stops the replica's calls, lets it Close its Breaker and exit, and
// returns its last report.
func (r *Replica) Quit(timeout time.Duration) cbfleet.Report {
	r.t.Helper()
	r.Send("quit")
	return r.awaitExit(timeout)
}

func (r *Replica) awaitExit(timeout time.Duration) cbfleet.Report {
	r.t.Helper()
	select {
	case <-r.exited:
	case <-time.After(timeout):
		r.t.Fatalf("replica %d did not exit within %v of quit%s", r.ID, timeout, r.diag())
	}
	r.mu.Lock()
	closed, err := r.closed, r.err
	r.mu.Unlock()
	if err != nil || closed == nil {
		r.t.Fatalf("replica %d did not close cleanly%s", r.ID, r.diag())
	}
	return *closed
}

// Kill ends the process with SIGKILL, as a crash would, and waits for it.
func (r *Replica) Kill() {
	if r.Alive() {
		r.cmd.Process.Kill()
	}
	<-r.exited
}

// Send writes cmd to every replica.
func (f Fleet) Send(cmd string) {
	for _, r := range f {
		r.Send(cmd)
	}
}

// WaitAll polls until ok holds for the latest report of every replica.
func (f Fleet) WaitAll(t testing.TB, what string, timeout time.Duration, ok func(cbfleet.Report) bool) []cbfleet.Report {
	t.Helper()
	deadline := time.Now().Add(timeout)
	reps := make([]cbfleet.Report, len(f))
	for i, r := range f {
		reps[i] = r.WaitFor(t, what, time.Until(deadline), ok)
	}
	return reps
}

// Phase ends the current phase of every replica (see Replica.Phase).
func (f Fleet) Phase(next string) []cbfleet.Report {
	ns := make([]int, len(f))
	for i, r := range f {
		ns[i] = r.sendPhase(next)
	}
	reps := make([]cbfleet.Report, len(f))
	for i, r := range f {
		reps[i] = r.awaitPhase(ns[i])
	}
	return reps
}

// Quit quits every replica at once (see Replica.Quit).
func (f Fleet) Quit(timeout time.Duration) []cbfleet.Report {
	for _, r := range f {
		r.Send("quit")
	}
	reps := make([]cbfleet.Report, len(f))
	for i, r := range f {
		reps[i] = r.awaitExit(timeout)
	}
	return reps
}

// Rejecting reports whether the latest calls of method were rejected, at
// least n in a row.
func Rejecting(method string, n int64) func(cbfleet.Report) bool {
	return func(rep cbfleet.Report) bool {
		m := rep.Methods[method]
		return m != nil && m.Streak >= n
	}
}

// Eventually polls cond until it holds or timeout passes.
func Eventually(t testing.TB, what string, timeout time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("no %s within %v", what, timeout)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
