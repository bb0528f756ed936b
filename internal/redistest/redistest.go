// Package redistest starts real redis-server processes for tests: a single
// server on a free loopback port that a test can stop, pause, resume and
// restart ([Start]), with ACL users of a given grant
// ([Server.SetUser]), and a replica of it ([StartReplica]); a master, its replica and a Sentinel that can fail
// over between them, keeping or losing the last writes ([StartSentinel]);
// and a three-master Redis Cluster, with or without a replica per master
// ([StartCluster], [StartClusterWithReplicas]); and, for benchmarks, a
// server under valgrind that counts the instructions commands cost it
// ([StartCounting]). Nothing is persisted; every process is stopped by
// t.Cleanup.
//
// When redis-server (or valgrind) is not installed the test is skipped,
// except under CI=true, where it fails: CI must never pass by skipping the
// real thing.
package redistest

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/cbgrpc/cbgrpc/internal/freeport"
)

const (
	// startTimeout bounds how long a server may take to answer PING.
	startTimeout = 10 * time.Second
	// waitTimeout bounds a wait for replication or a failover: they usually
	// take well under two seconds, but CI has two cores and -race.
	waitTimeout = 30 * time.Second
)

// kind is what a redis-server process is started as.
type kind int

const (
	standalone kind = iota
	// clusterNode also needs port+10000 free, for the cluster bus.
	clusterNode
	// sentinelNode needs a config file it can rewrite: Sentinel persists
	// what it monitors there, so a restarted Sentinel still monitors it.
	sentinelNode
)

// Server is one redis-server process on 127.0.0.1.
type Server struct {
	t    testing.TB
	bin  string
	dir  string
	port int
	kind kind
	// rdb is redistest's own client, for setting up and polling the server.
	rdb *goredis.Client

	// valgrind, when set, runs the server under callgrind (StartCounting).
	valgrind string

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{}
	paused bool
}

// Tool returns the path of a program a test needs (redis-server,
// luacheck) or ends the test: Fatal under CI=true, Skip otherwise.
func Tool(t testing.TB, name string) string {
	t.Helper()
	return binary(t, name)
}

// binary is Tool.
func binary(t testing.TB, name string) string {
	t.Helper()
	path, err := exec.LookPath(name)
	if err == nil {
		return path
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("redistest: %s not found (CI=true requires it): %v", name, err)
	}
	t.Skipf("redistest: %s not found: %v", name, err)
	return ""
}

// Start starts an empty redis-server on a free loopback port.
func Start(t testing.TB) *Server {
	t.Helper()
	return start(t, standalone)
}

func start(t testing.TB, k kind) *Server {
	t.Helper()
	return startServer(t, &Server{t: t, bin: binary(t, "redis-server"), dir: t.TempDir(), kind: k})
}

// startServer launches s on a free port, stopped by t.Cleanup.
func startServer(t testing.TB, s *Server) *Server {
	t.Helper()
	t.Cleanup(s.Stop)
	if s.kind == sentinelNode {
		if err := os.WriteFile(s.conf(), nil, 0o644); err != nil {
			t.Fatalf("redistest: write sentinel config: %v", err)
		}
	}
	// A free port found by listening may be taken before redis binds it:
	// try a few.
	var err error
	for range 5 {
		s.port, err = freeport.Loopback(s.kind == clusterNode)
		if err != nil {
			continue
		}
		if err = s.launch(); err == nil {
			s.rdb = goredis.NewClient(adminOptions(s.Addr()))
			t.Cleanup(func() { s.rdb.Close() })
			return s
		}
	}
	t.Fatalf("redistest: start redis-server: %v", err)
	return nil
}

// adminOptions are the options of redistest's own clients. A context
// deadline bounds every command, so a poll gives up on a paused server
// instead of blocking for go-redis's default read timeout, and nothing is
// retried: the poll loops retry.
func adminOptions(addr string) *goredis.Options {
	return &goredis.Options{Addr: addr, ContextTimeoutEnabled: true, MaxRetries: -1}
}

// conf is the path of a Sentinel's config file.
func (s *Server) conf() string {
	return filepath.Join(s.dir, "sentinel.conf")
}

func (s *Server) launch() error {
	args := []string{
		"--port", strconv.Itoa(s.port),
		"--bind", "127.0.0.1",
		"--save", "",
		"--appendonly", "no",
		"--dir", s.dir,
		"--logfile", "redis.log",
		// A full sync must not wait the default 5 s for more replicas.
		"--repl-diskless-sync-delay", "0",
	}
	switch s.kind {
	case clusterNode:
		args = append(args,
			"--cluster-enabled", "yes",
			"--cluster-config-file", "nodes.conf",
			"--cluster-node-timeout", "5000",
		)
	case sentinelNode:
		// The config file must be the first argument.
		args = append([]string{s.conf(), "--sentinel"}, args...)
	}
	cmd := exec.Command(s.bin, args...)
	if s.valgrind != "" {
		cmd = exec.Command(s.valgrind, append(callgrind(s.dir, s.bin), args...)...)
	}
	cmd.Dir = s.dir
	if err := cmd.Start(); err != nil {
		return err
	}
	exited := make(chan struct{})
	go func() {
		cmd.Wait()
		close(exited)
	}()
	s.mu.Lock()
	s.cmd, s.exited, s.paused = cmd, exited, false
	s.mu.Unlock()

	deadline := time.Now().Add(s.startTimeout())
	for time.Now().Before(deadline) {
		select {
		case <-exited:
			return fmt.Errorf("redis-server on port %d exited: %s", s.port, s.log())
		default:
		}
		if ping(s.Addr()) == nil {
			return nil
		}
		time.Sleep(10 * time.Millisecond)
	}
	s.kill()
	return fmt.Errorf("redis-server on port %d did not answer within %v: %s", s.port, s.startTimeout(), s.log())
}

// log returns the end of the server's log, for error messages.
func (s *Server) log() string {
	b, _ := os.ReadFile(filepath.Join(s.dir, "redis.log"))
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return string(bytes.TrimSpace(b))
}

func ping(addr string) error {
	conn, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return err
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(time.Second))
	if _, err := conn.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	buf := make([]byte, 64)
	n, err := conn.Read(buf)
	if err != nil {
		return err
	}
	if !bytes.HasPrefix(buf[:n], []byte("+PONG")) {
		return fmt.Errorf("PING answered %q", buf[:n])
	}
	return nil
}

// Addr is the server's host:port.
func (s *Server) Addr() string {
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port))
}

// Client returns a client of the server, closed by t.Cleanup.
func (s *Server) Client(t testing.TB) *goredis.Client {
	t.Helper()
	c := goredis.NewClient(&goredis.Options{Addr: s.Addr()})
	t.Cleanup(func() { c.Close() })
	return c
}

// Stop kills the server, resuming it first if paused. Stopping a stopped
// server does nothing.
func (s *Server) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.kill()
}

// kill ends the process and waits for it; s.mu must be held or the process
// unpublished.
func (s *Server) kill() {
	if s.cmd == nil {
		return
	}
	if s.paused {
		s.cmd.Process.Signal(syscall.SIGCONT)
	}
	s.cmd.Process.Kill()
	<-s.exited
	s.cmd, s.paused = nil, false
}

// Pause stops the process with SIGSTOP: connections stay open and nothing
// answers, as with a hung server or a network partition.
func (s *Server) Pause() {
	s.t.Helper()
	s.signal(syscall.SIGSTOP, true)
}

// Resume continues a paused server with SIGCONT.
func (s *Server) Resume() {
	s.t.Helper()
	s.signal(syscall.SIGCONT, false)
}

func (s *Server) isPaused() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.paused
}

func (s *Server) signal(sig syscall.Signal, paused bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		s.t.Fatalf("redistest: %v to a stopped server", sig)
	}
	if err := s.cmd.Process.Signal(sig); err != nil {
		s.t.Fatalf("redistest: %v: %v", sig, err)
	}
	s.paused = paused
}

// Restart stops the server and starts an empty one on the same port, as
// after a crash without persistence.
func (s *Server) Restart() {
	s.t.Helper()
	s.Stop()
	var err error
	// The old socket may linger for a moment.
	deadline := time.Now().Add(startTimeout)
	for time.Now().Before(deadline) {
		if err = s.launch(); err == nil {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	s.t.Fatalf("redistest: restart redis-server: %v", err)
}

// waitFor polls check until it returns nil and fails the test, naming what
// it waited for and the last error, when timeout passes first. Each check
// has a second: a paused server fails one check, not the whole wait.
func waitFor(t testing.TB, timeout time.Duration, what string, check func(ctx context.Context) error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := check(ctx)
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("redistest: %s: not done within %v: %v", what, timeout, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
