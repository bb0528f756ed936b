package redistest

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// StartCounting starts an empty redis-server, as Start does, under
// valgrind's callgrind, so that [Server.Instructions] can count what
// commands cost it in instructions: unlike CPU time, a count that does not
// move with what else the machine runs, how fast its cores are that day,
// or whether the server was idle. Such a server runs tens of times slower
// than a plain one: it is for benchmarks. When valgrind is not installed
// the benchmark is skipped, or fails under CI=true.
func StartCounting(t testing.TB) *Server {
	t.Helper()
	valgrind := binary(t, "valgrind")
	binary(t, "callgrind_control")
	return startServer(t, &Server{t: t, bin: binary(t, "redis-server"), dir: t.TempDir(), kind: standalone, valgrind: valgrind})
}

// callgrind is valgrind's command line for bin, its counts dumped into dir.
func callgrind(dir, bin string) []string {
	return []string{"--tool=callgrind", "--callgrind-out-file=" + filepath.Join(dir, "callgrind.out"), bin}
}

// startTimeout bounds how long the server may take to answer PING.
func (s *Server) startTimeout() time.Duration {
	if s.valgrind != "" {
		return 6 * startTimeout
	}
	return startTimeout
}

// Instructions returns how many instructions the server, started by
// StartCounting, ran while f ran: its own and its libraries', not the
// kernel's (the system calls that read commands and write replies). Its
// housekeeping meanwhile (serverCron, ten times a second) is counted too;
// run f long enough, and compare counts of the same length of time.
func (s *Server) Instructions(t testing.TB, f func()) int64 {
	t.Helper()
	s.mu.Lock()
	running := s.cmd != nil
	pid := ""
	if running {
		pid = strconv.Itoa(s.cmd.Process.Pid)
	}
	s.mu.Unlock()
	if s.valgrind == "" || !running {
		t.Fatal("redistest: Instructions of a server not started by StartCounting, or stopped")
	}
	control := func(op string) {
		if out, err := exec.Command("callgrind_control", op, pid).CombinedOutput(); err != nil {
			t.Fatalf("redistest: callgrind_control %s: %v: %s", op, err, out)
		}
	}
	control("--zero")
	f()
	control("--dump")
	dumps, err := filepath.Glob(filepath.Join(s.dir, "callgrind.out.*"))
	if err != nil || len(dumps) == 0 {
		t.Fatalf("redistest: no callgrind dump in %s (%v)", s.dir, err)
	}
	// Dumps are numbered from 1, in order.
	last, n := "", 0
	for _, d := range dumps {
		if i, err := strconv.Atoi(strings.TrimPrefix(filepath.Ext(d), ".")); err == nil && i > n {
			last, n = d, i
		}
	}
	return summary(t, last)
}

// summary reads the total of a callgrind dump: its line "summary: N".
func summary(t testing.TB, path string) int64 {
	t.Helper()
	file, err := os.Open(path)
	if err != nil {
		t.Fatalf("redistest: %v", err)
	}
	defer file.Close()
	lines := bufio.NewScanner(file)
	for lines.Scan() {
		if v, ok := strings.CutPrefix(lines.Text(), "summary: "); ok {
			n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			if err != nil {
				t.Fatalf("redistest: %s: summary %q: %v", path, v, err)
			}
			return n
		}
	}
	t.Fatalf("redistest: %s has no summary line (%v)", path, lines.Err())
	return 0
}
