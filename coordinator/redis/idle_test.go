package redis

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/cbgrpc/cbgrpc/coordinator"
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
	b.Run("ping", func(b *testing.B) {
		admin, rdb, _ := benchServer(b, conns)
		b.ReportMetric(idle(b, admin, b.N, func(ctx context.Context, _ int) error { return rdb.Ping(ctx).Err() }), "redis-cpu-µs/ping")
	})
	b.Run("script", func(b *testing.B) {
		admin, rdb, _ := benchServer(b, conns)
		at := goredis.NewScript("return 1")
		b.ReportMetric(idle(b, admin, b.N, func(ctx context.Context, _ int) error { return at.Run(ctx, rdb, nil).Err() }), "redis-cpu-µs/script")
	})
	b.Run("record", func(b *testing.B) {
		admin, _, c := benchServer(b, conns)
		p := coordinator.DefaultPolicy()
		outcomes := make([]coordinator.Outcome, 500)
		gen := birth(b, c, p)
		for i := range outcomes {
			outcomes[i].Generation = gen
		}
		b.ReportMetric(idle(b, admin, b.N, func(ctx context.Context, i int) error {
			_, err := c.Record(ctx, coordinator.RecordRequest{Scope: "s", Policy: p, Outcomes: outcomes, BatchID: "replica-" + strconv.Itoa(i)})
			return err
		}), "redis-cpu-µs/record")
	})
	b.Run("delivery", func(b *testing.B) {
		const reached = 64
		admin, rdb, _ := benchServer(b, conns)
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
