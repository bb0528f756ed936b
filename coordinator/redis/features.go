package redis

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"

	goredis "github.com/redis/go-redis/v9"
)

// A server is what the coordinator learns of the Redis Cluster it runs
// on, once: whether every master has sharded pub/sub (SPUBLISH and
// SSUBSCRIBE, from Redis 7.0 and in every Valkey), and the server of one
// that lacks it (of any master when none does). Without it, transitions
// and heartbeats go out by PUBLISH, which on a Cluster reaches the
// subscribers of every node.
type server struct {
	name    string // "Redis" or "Valkey"
	version string // as INFO server gives it
	sharded bool
}

// shardedSince is the first Redis version with sharded pub/sub; Valkey
// reports a redis_version of at least 7.2 besides its own.
const shardedSince = 7

// learn returns what the coordinator knows of the server, asking every
// master of a Cluster with INFO server the first time. A single server
// needs no asking: it gets plain pub/sub whatever its version. The answer
// is kept, which is no cache of breaker state: a server gains commands
// only by an upgrade, and what an older server has the newer one has too.
// Calls that race to learn it each ask; an error is not kept, so the next
// call asks again.
func (c *Coordinator) learn(ctx context.Context) (server, error) {
	if s := c.learned.Load(); s != nil {
		return *s, nil
	}
	cc, ok := c.client.(*goredis.ClusterClient)
	if !ok {
		return server{}, nil
	}
	var mu sync.Mutex
	least := server{sharded: true}
	err := cc.ForEachMaster(ctx, func(ctx context.Context, node *goredis.Client) error {
		info, err := node.Info(ctx, "server").Result()
		if err != nil {
			return fmt.Errorf("INFO server on %s: %w", node.Options().Addr, err)
		}
		s := parseServer(info)
		mu.Lock()
		defer mu.Unlock()
		if least.sharded && !s.sharded || least.version == "" {
			least = s
		}
		return nil
	})
	if err != nil {
		return server{}, fmt.Errorf("redis coordinator: cannot tell whether the Cluster has sharded pub/sub (Redis %d.0): %w", shardedSince, err)
	}
	c.learned.CompareAndSwap(nil, &least)
	return *c.learned.Load(), nil
}

// parseServer reads the text of INFO server. A server that names no
// version (a proxy) is taken to lack sharded pub/sub: PUBLISH works on
// every one.
func parseServer(info string) server {
	field := func(name string) string {
		for _, line := range strings.Split(info, "\n") {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), name+":"); ok {
				return v
			}
		}
		return ""
	}
	s := server{name: "Redis", version: field("redis_version")}
	major, _ := strconv.Atoi(strings.SplitN(s.version, ".", 2)[0])
	s.sharded = major >= shardedSince
	if v := field("valkey_version"); v != "" {
		s.name, s.version = "Valkey", v
	}
	return s
}

// String names the server and what it gives: "Redis 6.2.16 (PUBLISH)".
func (s server) String() string {
	pubsub := "PUBLISH"
	if s.sharded {
		pubsub = "SPUBLISH"
	}
	return s.name + " " + s.version + " (" + pubsub + ")"
}

// scriptSet returns the scripts that suit the server: those that publish
// with SPUBLISH on a Cluster that has it, else with PUBLISH.
func (c *Coordinator) scriptSet(ctx context.Context) (*scripts, error) {
	s, err := c.learn(ctx)
	switch {
	case err != nil:
		return nil, err
	case s.sharded:
		return shardedScripts, nil
	}
	return plainScripts, nil
}
