package redistest_test

import (
	"context"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/cbgrpc/cbgrpc/internal/redistest"
)

func TestServerLifecycle(t *testing.T) {
	ctx := context.Background()
	s := redistest.Start(t)
	rdb := s.Client(t)
	if err := rdb.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}

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

func TestCluster(t *testing.T) {
	ctx := context.Background()
	c := redistest.StartCluster(t)
	cc := c.Client(t)
	for _, k := range []string{"a", "b", "c", "d", "e", "f"} {
		if err := cc.Set(ctx, k, k, 0).Err(); err != nil {
			t.Fatalf("SET %s: %v", k, err)
		}
	}
	var mu sync.Mutex
	masters := 0
	err := cc.ForEachMaster(ctx, func(ctx context.Context, m *goredis.Client) error {
		mu.Lock()
		defer mu.Unlock()
		masters++
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if masters != 3 {
		t.Errorf("cluster has %d masters, want 3", masters)
	}
}
