package redis

import (
	"context"
	"strconv"
	"testing"

	goredis "github.com/redis/go-redis/v9"

	"github.com/cbgrpc/cbgrpc/coordinator"
	"github.com/cbgrpc/cbgrpc/internal/redistest"
)

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
				_, err := c.Admit(ctx, coordinator.AdmitRequest{Scope: "s", Policy: p, Claim: "claim"})
				return err
			}
		})
	})
	// A calm Record: of one replica, and of a fleet, each from the next of
	// 16 replicas, as the scale figure's fleet sends them.
	for _, fleet := range []int{1, 16} {
		name := "record"
		if fleet > 1 {
			name = "record-fleet"
		}
		b.Run(name, func(b *testing.B) {
			count(b, func(_ *goredis.Client, c *Coordinator) func(context.Context, int) error {
				outcomes := make([]coordinator.Outcome, 500)
				gen := birth(b, c, p)
				for i := range outcomes {
					outcomes[i].Generation = gen
				}
				return func(ctx context.Context, i int) error {
					_, err := c.Record(ctx, coordinator.RecordRequest{Scope: "s", Policy: p, Outcomes: outcomes,
						Replica: "pod-" + strconv.Itoa(i%fleet), BatchID: "batch-" + strconv.Itoa(i)})
					return err
				}
			})
		})
	}
	b.Run("heartbeat", func(b *testing.B) {
		count(b, func(rdb *goredis.Client, c *Coordinator) func(context.Context, int) error {
			channel := DefaultPrefix + layout + ":{fleet}:heartbeat:bench"
			return func(ctx context.Context, _ int) error {
				return plainScripts.heartbeat.Run(ctx, rdb, []string{channel}, "bench", "").Err()
			}
		})
	})
}
