package redistest_test

import (
	"context"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/cbgrpc/cbgrpc/internal/redistest"
)

func TestServerLifecycle(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := redistest.Start(t)
	rdb := s.Client(t)
	mustSet(t, rdb, "k", "v")

	s.Pause()
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	// A context deadline bounds a read only with ContextTimeoutEnabled.
	probe := goredis.NewClient(&goredis.Options{Addr: s.Addr(), ContextTimeoutEnabled: true})
	defer probe.Close()
	if err := probe.Ping(short).Err(); err == nil {
		t.Error("PING answered while paused")
	}
	s.Resume()
	if err := rdb.Ping(ctx).Err(); err != nil {
		t.Fatalf("PING after resume: %v", err)
	}

	s.Restart()
	n, err := rdb.Exists(ctx, "k").Result()
	if err != nil {
		t.Fatalf("EXISTS after restart: %v", err)
	}
	if n != 0 {
		t.Error("restarted server still holds data")
	}

	s.Stop()
	if err := probe.Ping(ctx).Err(); err == nil {
		t.Error("PING answered after Stop")
	}
}

func mustSet(t *testing.T, c goredis.Cmdable, key, value string) {
	t.Helper()
	if err := c.Set(context.Background(), key, value, 0).Err(); err != nil {
		t.Fatalf("SET %s: %v", key, err)
	}
}

func mustGet(t *testing.T, c goredis.Cmdable, key, want string) {
	t.Helper()
	if got, err := c.Get(context.Background(), key).Result(); err != nil || got != want {
		t.Fatalf("GET %s = %q, %v; want %q", key, got, err, want)
	}
}
