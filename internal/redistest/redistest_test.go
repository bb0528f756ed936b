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

// A counting server counts what commands cost it: a script that loops
// costs more than a PING, and each count is about the same when repeated.
func TestInstructions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := redistest.StartCounting(t)
	rdb := s.Client(t)
	loop := goredis.NewScript("local n = 0 for i = 1, 10000 do n = n + i end return n")
	count := func(op func() error) int64 {
		return s.Instructions(t, func() {
			for range 20 {
				if err := op(); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
	ping := func() error { return rdb.Ping(ctx).Err() }
	script := func() error { return loop.Run(ctx, rdb, nil).Err() }
	script() // loaded before counting
	pings, loops, again := count(ping), count(script), count(script)
	t.Logf("20 PINGs: %d instructions; 20 loops of 10,000: %d and %d", pings, loops, again)
	if pings <= 0 || loops < 10*pings {
		t.Errorf("20 loops of 10,000 cost %d instructions, 20 PINGs %d: want the loops 10 times the PINGs at least", loops, pings)
	}
	if d := float64(again-loops) / float64(loops); d > 0.1 || d < -0.1 {
		t.Errorf("the same 20 loops cost %d, then %d instructions: want within 10 %%", loops, again)
	}
}
