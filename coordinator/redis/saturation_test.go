package redis

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/cbgrpc/cbgrpc/coordinator"
	"github.com/cbgrpc/cbgrpc/internal/redistest"
)

// BenchmarkBusyServer measures what a fleet's commands cost a busy Redis,
// which is what capacity is about: on an idle server each command is a turn
// of the event loop of its own with cold caches (the fleet simulator's
// figures at a few hundred replicas), on a busy one a turn serves many
// connections. 128 connections send one command at a time each, as 128
// replicas would, with no pipelining:
//   - record: a calm replica's Record of one hot scope at the default
//     policy, 500 successes (5 s at 100 calls a second) as one run, each
//     with a batch ID of its own;
//   - heartbeat: the heartbeat script (heartbeat.lua) on one of 128
//     channels, each followed by one subscription: what a heartbeat costs
//     besides the followers it reaches (2.1-2.6 µs each, see
//     sharedheartbeat.go).
//
// It reports Redis CPU per command (INFO cpu over INFO commandstats) and
// how busy Redis was (cores): the client shares the machine, so Redis may
// not be saturated; the report says how close it came.
//
//	go test -run XXX -bench BusyServer -benchtime 200000x ./coordinator/redis
func BenchmarkBusyServer(b *testing.B) {
	const conns = 128
	b.Run("record", func(b *testing.B) {
		admin, _, c := benchServer(b, conns)
		p := coordinator.DefaultPolicy()
		outcomes := make([]coordinator.Outcome, 500)
		gen := birth(b, c, p)
		for i := range outcomes {
			outcomes[i].Generation = gen
		}
		var n atomic.Int64
		busy(b, admin, conns, "evalsha", func(ctx context.Context) {
			id := "replica-" + strconv.FormatInt(n.Add(1), 36)
			if _, err := c.Record(ctx, coordinator.RecordRequest{Scope: "s", Policy: p, Outcomes: outcomes, BatchID: id}); err != nil {
				b.Error(err)
			}
		})
	})
	b.Run("heartbeat", func(b *testing.B) {
		admin, rdb, _ := benchServer(b, conns)
		ctx := context.Background()
		channels := make([]string, conns)
		for i := range channels {
			channels[i] = DefaultPrefix + layout + ":{fleet}:heartbeat:bench" + strconv.Itoa(i)
		}
		followers := admin.Subscribe(ctx, channels...)
		defer followers.Close()
		for range channels {
			if _, err := followers.Receive(ctx); err != nil {
				b.Fatal(err)
			}
		}
		go func() {
			for range followers.Channel() {
			}
		}()
		var n atomic.Int64
		busy(b, admin, conns, "evalsha", func(ctx context.Context) {
			ch := channels[n.Add(1)%conns]
			if err := plainScripts.heartbeat.Run(ctx, rdb, []string{ch}, "bench", "").Err(); err != nil {
				b.Error(err)
			}
		})
	})
	// What a Watch in doubt asks of its shared channel (census.lua), on
	// a channel with as many followers as the heartbeats' above.
	b.Run("census", func(b *testing.B) {
		admin, rdb, _ := benchServer(b, conns)
		ctx := context.Background()
		ch := DefaultPrefix + layout + ":{fleet}:heartbeat"
		for range conns {
			followers := admin.Subscribe(ctx, ch)
			b.Cleanup(func() { followers.Close() })
			if _, err := followers.Receive(ctx); err != nil {
				b.Fatal(err)
			}
		}
		busy(b, admin, conns, "evalsha", func(ctx context.Context) {
			if err := plainScripts.census.Run(ctx, rdb, []string{ch}).Err(); err != nil {
				b.Error(err)
			}
		})
	})
}

// benchServer starts a server and returns a client to read its statistics
// with, a client of conns connections for the load, and a coordinator on it.
func benchServer(b *testing.B, conns int) (admin, rdb *goredis.Client, c *Coordinator) {
	srv := redistest.Start(b)
	rdb = goredis.NewClient(&goredis.Options{Addr: srv.Addr(), PoolSize: conns, MinIdleConns: conns})
	b.Cleanup(func() { rdb.Close() })
	return srv.Client(b), rdb, New(rdb)
}

// busy runs op b.N times from conns goroutines and reports Redis's CPU per
// cmd it ran, and the cores it used.
func busy(b *testing.B, admin *goredis.Client, conns int, cmd string, op func(context.Context)) {
	ctx := context.Background()
	if err := admin.ConfigResetStat(ctx).Err(); err != nil {
		b.Fatal(err)
	}
	cpu, start := redisCPU(b, admin), time.Now()
	b.ResetTimer()
	b.SetParallelism((conns + 1) / 2) // GOMAXPROCS is 2 here
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			op(ctx)
		}
	})
	b.StopTimer()
	spent, wall := redisCPU(b, admin)-cpu, time.Since(start)
	calls, _ := serverStats(b, admin)
	b.ReportMetric(spent/float64(calls[cmd]), "redis-cpu-µs/"+cmd)
	b.ReportMetric(spent/float64(wall.Microseconds()), "redis-cores")
}
