// Package redistest starts real redis-server processes for tests: a single
// server on a free loopback port that a test can stop, pause, resume and
// restart, and a three-node Redis Cluster. Nothing is persisted; every
// process is stopped by t.Cleanup.
//
// When redis-server is not installed the test is skipped, except under
// CI=true, where it fails: CI must never pass by skipping the real thing.
package redistest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// startTimeout bounds how long a server may take to answer PING.
const startTimeout = 10 * time.Second

// Server is one redis-server process on 127.0.0.1.
type Server struct {
	t    testing.TB
	bin  string
	dir  string
	port int
	args []string

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{}
	paused bool
}

// binary returns the path of redis-server or ends the test: Fatal under
// CI=true, Skip otherwise.
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
	return start(t, nil)
}

func start(t testing.TB, extra []string) *Server {
	t.Helper()
	s := &Server{t: t, bin: binary(t, "redis-server"), dir: t.TempDir(), args: extra}
	t.Cleanup(s.Stop)
	// A free port found by listening may be taken before redis binds it:
	// try a few.
	var err error
	for range 5 {
		s.port, err = freePort(len(extra) > 0)
		if err != nil {
			continue
		}
		if err = s.launch(); err == nil {
			return s
		}
	}
	t.Fatalf("redistest: start redis-server: %v", err)
	return nil
}

// freePort returns a loopback port nobody listens on. A cluster node also
// needs port+10000 for its bus.
func freePort(cluster bool) (int, error) {
	for range 20 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, err
		}
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		if !cluster {
			return port, nil
		}
		if port+10000 > 65535 {
			continue
		}
		bus, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port+10000))
		if err != nil {
			continue
		}
		bus.Close()
		return port, nil
	}
	return 0, errors.New("no free port pair for a cluster node")
}

func (s *Server) launch() error {
	args := []string{
		"--port", strconv.Itoa(s.port),
		"--bind", "127.0.0.1",
		"--save", "",
		"--appendonly", "no",
		"--dir", s.dir,
		"--logfile", "redis.log",
	}
	args = append(args, s.args...)
	cmd := exec.Command(s.bin, args...)
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

	deadline := time.Now().Add(startTimeout)
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
	return fmt.Errorf("redis-server on port %d did not answer within %v: %s", s.port, startTimeout, s.log())
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

// Cluster is a Redis Cluster of three masters without replicas.
type Cluster struct {
	Nodes []*Server
}

// StartCluster starts three cluster-enabled servers, assigns every slot
// with redis-cli --cluster create and waits until each node reports
// cluster_state:ok.
func StartCluster(t testing.TB) *Cluster {
	t.Helper()
	cli := binary(t, "redis-cli")
	c := &Cluster{}
	for range 3 {
		c.Nodes = append(c.Nodes, start(t, []string{
			"--cluster-enabled", "yes",
			"--cluster-config-file", "nodes.conf",
			"--cluster-node-timeout", "5000",
		}))
	}
	args := append([]string{"--cluster", "create"}, c.Addrs()...)
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	out, err := exec.Command(cli, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("redistest: redis-cli %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	ctx := context.Background()
	deadline := time.Now().Add(30 * time.Second)
	for _, n := range c.Nodes {
		rdb := n.Client(t)
		for {
			info, err := rdb.ClusterInfo(ctx).Result()
			if err == nil && strings.Contains(info, "cluster_state:ok") && strings.Contains(info, "cluster_known_nodes:3") {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("redistest: cluster not ok on %s: %v\n%s", n.Addr(), err, info)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return c
}

// Addrs are the nodes' addresses.
func (c *Cluster) Addrs() []string {
	addrs := make([]string, len(c.Nodes))
	for i, n := range c.Nodes {
		addrs[i] = n.Addr()
	}
	return addrs
}

// Client returns a cluster client, closed by t.Cleanup.
func (c *Cluster) Client(t testing.TB) *goredis.ClusterClient {
	t.Helper()
	cc := goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: c.Addrs()})
	t.Cleanup(func() { cc.Close() })
	return cc
}
