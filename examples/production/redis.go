package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// redisServer is a redis-server this example started, with nothing
// persisted, for a run without -redis.
type redisServer struct {
	Addr   string
	cmd    *exec.Cmd
	dir    string
	exited chan struct{}
}

// startRedis starts a redis-server on a free loopback port and returns
// once it answers. A port found free may be taken before redis-server
// binds it: it tries a few.
func startRedis() (*redisServer, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, fmt.Errorf("no -redis given and no redis-server to start (apt-get install redis-server): %w", err)
	}
	for range 3 {
		var s *redisServer
		if s, err = launchRedis(bin); err == nil {
			return s, nil
		}
	}
	return nil, err
}

func launchRedis(bin string) (*redisServer, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	addr := l.Addr().String()
	l.Close()
	_, port, _ := net.SplitHostPort(addr)
	dir, err := os.MkdirTemp("", "cbgrpc-example-redis")
	if err != nil {
		return nil, err
	}
	s := &redisServer{Addr: addr, dir: dir, exited: make(chan struct{})}
	s.cmd = exec.Command(bin, "--port", port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", dir)
	if err := s.cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	go func() {
		s.cmd.Wait()
		close(s.exited)
	}()
	rdb := goredis.NewClient(&goredis.Options{Addr: addr, ContextTimeoutEnabled: true, MaxRetries: -1})
	defer rdb.Close()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		select {
		case <-s.exited:
			os.RemoveAll(dir)
			return nil, fmt.Errorf("redis-server on %s exited at start (port taken?)", addr)
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		info, err := rdb.InfoMap(ctx, "server").Result()
		cancel()
		if err != nil {
			continue
		}
		// Another redis-server that took the port meanwhile is not ours.
		if pid := info["Server"]["process_id"]; pid != strconv.Itoa(s.cmd.Process.Pid) {
			s.Stop()
			return nil, fmt.Errorf("%s is served by another redis-server (pid %s)", addr, pid)
		}
		return s, nil
	}
	s.Stop()
	return nil, errors.New("redis-server on " + addr + " did not answer within 10s")
}

// Stop shuts the server down and removes its directory; SIGTERM first,
// SIGKILL if it has not exited within 5s.
func (s *redisServer) Stop() {
	s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.exited:
	case <-time.After(5 * time.Second):
		s.cmd.Process.Kill()
		<-s.exited
	}
	os.RemoveAll(s.dir)
}
