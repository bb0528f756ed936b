package redis

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/cbgrpc/cbgrpc/coordinator"
	"github.com/cbgrpc/cbgrpc/internal/redistest"
)

// BenchmarkIdleServer is BenchmarkBusyServer's other half: what the same
// commands cost a Redis that has nothing else to do, as in the fleet
// simulator (bench/cmd/cbfleetsim) at a few hundred replicas, where each
// command wakes the server on its own. Commands go at idlePace a second,
// each from a goroutine of its own over a pool of 64 connections, and it
// reports Redis CPU per command (INFO cpu) less what the server spends
// with no command at all, measured for a second before:
//   - ping: a PING, the floor of any command;
//   - script: a script that returns at once;
//   - record: a calm replica's Record, as in BenchmarkBusyServer;
//   - delivery: what a message delivered to a follower adds, from a
//     PUBLISH to a channel of 64 followers against one to a channel of
//     none, alternately.
//
// The difference between the two benchmarks is the machine's: on a VM, a
// server woken from idle pays for the wake-up, which a busy server shares
// among the commands of one turn of its event loop.
//
//	go test -run XXX -bench IdleServer -benchtime 1000x ./coordinator/redis
func BenchmarkIdleServer(b *testing.B) {
	const conns = 64
	setup := func(b *testing.B) (admin, rdb *goredis.Client, c *Coordinator) {
		srv := redistest.Start(b)
		rdb = goredis.NewClient(&goredis.Options{Addr: srv.Addr(), PoolSize: conns, MinIdleConns: conns})
		b.Cleanup(func() { rdb.Close() })
		return srv.Client(b), rdb, New(rdb)
	}
	b.Run("ping", func(b *testing.B) {
		admin, rdb, _ := setup(b)
		b.ReportMetric(idle(b, admin, b.N, func(ctx context.Context, _ int) error { return rdb.Ping(ctx).Err() }), "redis-cpu-µs/ping")
	})
	b.Run("script", func(b *testing.B) {
		admin, rdb, _ := setup(b)
		at := goredis.NewScript("return 1")
		b.ReportMetric(idle(b, admin, b.N, func(ctx context.Context, _ int) error { return at.Run(ctx, rdb, nil).Err() }), "redis-cpu-µs/script")
	})
	b.Run("record", func(b *testing.B) {
		admin, _, c := setup(b)
		p := coordinator.DefaultPolicy()
		outcomes := make([]coordinator.Outcome, 500)
		gen := birth(b, c, p)
		for i := range outcomes {
			outcomes[i].Generation = gen
		}
		b.ReportMetric(idle(b, admin, b.N, func(ctx context.Context, i int) error {
			_, err := c.Record(coordinator.WithBatchID(ctx, "replica-"+strconv.Itoa(i)), "s", p, outcomes)
			return err
		}), "redis-cpu-µs/record")
	})
	b.Run("delivery", func(b *testing.B) {
		const reached = 64
		admin, rdb, _ := setup(b)
		ctx := context.Background()
		for range reached {
			f := goredis.NewClient(&goredis.Options{Addr: admin.Options().Addr})
			sub := f.Subscribe(ctx, "followed")
			if _, err := sub.Receive(ctx); err != nil {
				b.Fatal(err)
			}
			go func() {
				for range sub.Channel() {
				}
			}()
			b.Cleanup(func() { sub.Close(); f.Close() })
		}
		// Blocks of each kind in turn, so that a drift of the machine
		// weighs on both alike.
		const blocks = 4
		var none, followed float64
		for range blocks {
			none += idle(b, admin, b.N/blocks/2, func(ctx context.Context, _ int) error {
				return rdb.Publish(ctx, "unfollowed", "heartbeat").Err()
			})
			followed += idle(b, admin, b.N/blocks/2, func(ctx context.Context, _ int) error {
				return rdb.Publish(ctx, "followed", "heartbeat").Err()
			})
		}
		b.ReportMetric((followed-none)/blocks/reached, "redis-cpu-µs/delivery")
	})
}

// idlePace is how many commands a second BenchmarkIdleServer sends: a few
// hundred replicas' Records, one every 5 s each.
const idlePace = 100

// idle runs op n times at idlePace a second and returns Redis's CPU per
// op, net of what the server spent idle in the second before.
func idle(b *testing.B, admin *goredis.Client, n int, op func(ctx context.Context, i int) error) float64 {
	ctx := context.Background()
	before := redisCPU(b, admin)
	time.Sleep(time.Second)
	idleUs := redisCPU(b, admin) - before
	tick := time.NewTicker(time.Second / idlePace)
	defer tick.Stop()
	var wg sync.WaitGroup
	start, cpu := time.Now(), redisCPU(b, admin)
	for i := range n {
		<-tick.C
		wg.Go(func() {
			if err := op(ctx, i); err != nil {
				b.Error(err)
			}
		})
	}
	wg.Wait()
	return (redisCPU(b, admin) - cpu - idleUs*time.Since(start).Seconds()) / float64(max(n, 1))
}

// BenchmarkInstructions counts what the fleet's commands cost Redis in
// instructions, on a server run under valgrind's callgrind
// (redistest.StartCounting), one command at a time: a measure that
// neither the VM's speed of the day nor the server's idleness moves, for
// comparing two versions of a script. It leaves out the kernel's share
// (the system calls that carry a command), which the two benchmarks above
// include.
//
//	go test -run XXX -bench Instructions -benchtime 300x ./coordinator/redis
func BenchmarkInstructions(b *testing.B) {
	// count reports the instructions per op, which setup makes for a
	// coordinator on a counting server.
	count := func(b *testing.B, setup func(rdb *goredis.Client, c *Coordinator) func(ctx context.Context, i int) error) {
		ctx := context.Background()
		srv := redistest.StartCounting(b)
		rdb := srv.Client(b)
		op := setup(rdb, New(rdb))
		run := func(n int) {
			for i := range n {
				if err := op(ctx, i); err != nil {
					b.Fatal(err)
				}
			}
		}
		run(20) // the scripts loaded, the server warm
		b.ResetTimer()
		n := srv.Instructions(b, func() { run(b.N) })
		b.ReportMetric(float64(n)/float64(b.N), "instructions/op")
	}
	b.Run("ping", func(b *testing.B) {
		count(b, func(rdb *goredis.Client, _ *Coordinator) func(context.Context, int) error {
			return func(ctx context.Context, _ int) error { return rdb.Ping(ctx).Err() }
		})
	})
	b.Run("script", func(b *testing.B) {
		at := goredis.NewScript("return 1")
		count(b, func(rdb *goredis.Client, _ *Coordinator) func(context.Context, int) error {
			return func(ctx context.Context, _ int) error { return at.Run(ctx, rdb, nil).Err() }
		})
	})
	p := coordinator.DefaultPolicy()
	b.Run("admit", func(b *testing.B) {
		count(b, func(_ *goredis.Client, c *Coordinator) func(context.Context, int) error {
			birth(b, c, p)
			return func(ctx context.Context, _ int) error {
				_, err := c.Admit(ctx, "s", p, "claim")
				return err
			}
		})
	})
	b.Run("record", func(b *testing.B) {
		count(b, func(_ *goredis.Client, c *Coordinator) func(context.Context, int) error {
			outcomes := make([]coordinator.Outcome, 500)
			gen := birth(b, c, p)
			for i := range outcomes {
				outcomes[i].Generation = gen
			}
			return func(ctx context.Context, i int) error {
				_, err := c.Record(coordinator.WithBatchID(ctx, "replica-"+strconv.Itoa(i)), "s", p, outcomes)
				return err
			}
		})
	})
	b.Run("heartbeat", func(b *testing.B) {
		count(b, func(rdb *goredis.Client, c *Coordinator) func(context.Context, int) error {
			channel := DefaultPrefix + layout + ":{fleet}:heartbeat:bench"
			return func(ctx context.Context, _ int) error {
				return c.scripts.heartbeat.Run(ctx, rdb, []string{channel}, "bench", "").Err()
			}
		})
	})
}
