package bench

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/cbgrpc/cbgrpc/internal/freeport"
)

// Redis is a redis-server this package started, or one it was given.
type Redis struct {
	Addr string
	cmd  *exec.Cmd
	dir  string
}

// StartRedis starts a private redis-server on a free loopback port, with no
// persistence.
func StartRedis() (*Redis, error) {
	port, err := freeport.Loopback(false)
	if err != nil {
		return nil, err
	}
	return startRedis(port)
}

// startRedis starts a redis-server on port with extra arguments, and
// returns once it answers PING. It makes sure the server that answers is
// the one it started, so that a port taken meanwhile by another server
// (the shared one, say) is never mistaken for it.
func startRedis(port int, extra ...string) (*Redis, error) {
	dir, err := os.MkdirTemp("", "cbbench-redis")
	if err != nil {
		return nil, err
	}
	args := append([]string{"--port", strconv.Itoa(port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", dir}, extra...)
	cmd := exec.Command("redis-server", args...)
	if err := cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("start redis-server (is it installed?): %w", err)
	}
	r := &Redis{Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), cmd: cmd, dir: dir}
	c := goredis.NewClient(&goredis.Options{Addr: r.Addr})
	defer c.Close()
	for deadline := time.Now().Add(10 * time.Second); ; {
		info, err := c.Info(context.Background(), "server").Result()
		if err == nil {
			if pid := infoFields(info)["process_id"]; pid != strconv.Itoa(cmd.Process.Pid) {
				r.Stop()
				return nil, fmt.Errorf("%s is served by another redis-server (pid %s)", r.Addr, pid)
			}
			return r, nil
		}
		if time.Now().After(deadline) {
			r.Stop()
			return nil, fmt.Errorf("redis-server on %s did not answer PING", r.Addr)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Stop ends a server that StartRedis started.
func (r *Redis) Stop() {
	if r.cmd != nil {
		r.cmd.Process.Kill()
		r.cmd.Wait()
		os.RemoveAll(r.dir)
	}
}

// Target is the server, for a simulated fleet.
func (r *Redis) Target() Target { return Target{Addrs: []string{r.Addr}} }

// commandCounter is a go-redis hook that counts the commands a client
// sends: what a breaker costs in round trips, whatever a script does inside
// Redis. Of them, it counts apart the scripts of the calls and the
// transition feed's heartbeats, which a fleet's Redis CPU is split between.
type commandCounter struct{ n, scripts, heartbeats atomic.Int64 }

func (c *commandCounter) count(cmd goredis.Cmder) {
	c.n.Add(1)
	switch cmd.Name() {
	case "evalsha", "eval", "evalsha_ro", "eval_ro":
		if isHeartbeat(cmd.Args()) {
			c.heartbeats.Add(1)
		} else {
			c.scripts.Add(1)
		}
	}
}

// isHeartbeat reports whether the arguments of a script's command are
// those of a feed's heartbeat: its one key is a heartbeat channel,
// "<prefix>v2:{fleet}:heartbeat..." or "<prefix>v2:{hb<n>}:heartbeat..."
// (coordinator/redis/heartbeat.lua).
func isHeartbeat(args []any) bool {
	if len(args) < 4 {
		return false
	}
	key, _ := args[3].(string)
	return strings.Contains(key, "}:heartbeat")
}

func (c *commandCounter) DialHook(next goredis.DialHook) goredis.DialHook { return next }

func (c *commandCounter) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		c.count(cmd)
		return next(ctx, cmd)
	}
}

func (c *commandCounter) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []goredis.Cmder) error {
		for _, cmd := range cmds {
			c.count(cmd)
		}
		return next(ctx, cmds)
	}
}

// Commands returns how many commands the server has run in total, less
// INFO itself, from INFO commandstats.
func Commands(ctx context.Context, c *goredis.Client) (int64, error) {
	info, err := c.Info(ctx, "commandstats").Result()
	if err != nil {
		return 0, err
	}
	var total int64
	for name, s := range commandStats(info) {
		if name != "info" {
			total += s.calls
		}
	}
	return total, nil
}
