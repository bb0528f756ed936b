package redis

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/cbgrpc/cbgrpc/coordinator"
	"github.com/cbgrpc/cbgrpc/coordinator/coordinatortest"
	"github.com/cbgrpc/cbgrpc/internal/redistest"
)

// Benchmarks report, besides the round trip, what Redis spent: the Redis
// commands a script ran per operation ("cmds/op", from INFO commandstats)
// and the script's execution time on the server ("script-µs/op").
//
//	go test -run XXX -bench . ./coordinator/redis

// serverStats reads INFO commandstats: calls per command and the
// microseconds spent in EVALSHA.
func serverStats(b *testing.B, rdb *goredis.Client) (calls map[string]int64, scriptUsec int64) {
	info, err := rdb.Info(context.Background(), "commandstats").Result()
	if err != nil {
		b.Fatal(err)
	}
	calls = map[string]int64{}
	for _, line := range strings.Split(info, "\r\n") {
		name, stats, ok := strings.Cut(strings.TrimPrefix(line, "cmdstat_"), ":")
		if !ok || name == line {
			continue
		}
		for _, kv := range strings.Split(stats, ",") {
			k, v, _ := strings.Cut(kv, "=")
			n, _ := strconv.ParseInt(v, 10, 64)
			switch {
			case k == "calls":
				calls[name] = n
			case k == "usec" && (name == "evalsha" || name == "eval"):
				scriptUsec += n
			}
		}
	}
	return calls, scriptUsec
}

// measure runs op b.N times and reports Redis's side of it.
func measure(b *testing.B, rdb *goredis.Client, op func(i int)) {
	ctx := context.Background()
	rdb.ConfigResetStat(ctx)
	b.ResetTimer()
	for i := range b.N {
		op(i)
	}
	b.StopTimer()
	calls, usec := serverStats(b, rdb)
	var cmds int64
	for name, n := range calls {
		switch name {
		case "evalsha", "eval", "config|resetstat", "info", "hello", "client|setinfo", "ping":
		default:
			cmds += n
		}
	}
	b.ReportMetric(float64(cmds)/float64(b.N), "cmds/op")
	b.ReportMetric(float64(usec)/float64(b.N), "script-µs/op")
}

func benchPolicy(buckets int) coordinator.Policy {
	return coordinator.Policy{
		Window: time.Duration(buckets) * time.Second, Buckets: buckets,
		MinCalls: 20, FailureRatio: 0.5,
		OpenFor: time.Second, Probes: 3, ProbeLease: time.Hour, ProbeSuccesses: 1 << 30,
	}
}

func BenchmarkAdmitClosed(b *testing.B) {
	ctx := context.Background()
	rdb := redistest.Start(b).Client(b)
	c := New(rdb)
	p := benchPolicy(10)
	if _, err := c.Record(ctx, "s", p, []coordinator.Outcome{{Generation: birth(b, c, p)}}); err != nil {
		b.Fatal(err)
	}
	measure(b, rdb, func(i int) {
		if _, err := c.Admit(ctx, "s", p, "claim"); err != nil {
			b.Fatal(err)
		}
	})
}

// BenchmarkRecord moves the clock one bucket per call, so that every
// Record opens a bucket and drops the oldest: the window stays full.
func BenchmarkRecord(b *testing.B) {
	for _, buckets := range []int{10, 60} {
		for _, batch := range []int{1, 64} {
			b.Run(fmt.Sprintf("buckets=%d/outcomes=%d", buckets, batch), func(b *testing.B) {
				ctx := context.Background()
				rdb := redistest.Start(b).Client(b)
				p := benchPolicy(buckets)
				clock := coordinatortest.NewClock()
				c := New(rdb, WithClock(clock.Now))
				outcomes := make([]coordinator.Outcome, batch)
				gen := birth(b, c, p)
				for i := range outcomes {
					outcomes[i].Generation = gen
				}
				for i := range buckets {
					clock.Advance(p.BucketWidth())
					c.Record(coordinator.WithBatchID(ctx, fmt.Sprint("warm", i)), "s", p, outcomes)
				}
				measure(b, rdb, func(i int) {
					clock.Advance(p.BucketWidth())
					res, err := c.Record(coordinator.WithBatchID(ctx, strconv.Itoa(i)), "s", p, outcomes)
					if err != nil || res.Stale != 0 {
						b.Fatal(res, err)
					}
				})
			})
		}
	}
}

// BenchmarkRecordSteady is a busy scope's steady state at the default
// policy (30 s window, 10 buckets) and record interval: a replica's
// Record of successes every second, so three to a bucket.
func BenchmarkRecordSteady(b *testing.B) {
	ctx := context.Background()
	rdb := redistest.Start(b).Client(b)
	p := coordinator.DefaultPolicy()
	clock := coordinatortest.NewClock()
	c := New(rdb, WithClock(clock.Now))
	gen := birth(b, c, p)
	outcomes := make([]coordinator.Outcome, 100)
	for i := range outcomes {
		outcomes[i].Generation = gen
	}
	measure(b, rdb, func(i int) {
		clock.Advance(time.Second)
		res, err := c.Record(coordinator.WithBatchID(ctx, strconv.Itoa(i)), "s", p, outcomes)
		if err != nil || res.Stale != 0 {
			b.Fatal(res, err)
		}
	})
}

func BenchmarkAdmitHalfOpen(b *testing.B) {
	ctx := context.Background()
	rdb := redistest.Start(b).Client(b)
	clock := coordinatortest.NewClock()
	c := New(rdb, WithClock(clock.Now))
	p := benchPolicy(10)
	p.ProbeLease = time.Millisecond
	halfOpen(b, c, p, clock)
	// Each admission finds the previous lease expired, prunes it and
	// claims a slot.
	measure(b, rdb, func(i int) {
		clock.Advance(p.ProbeLease)
		if d, err := c.Admit(ctx, "s", p, strconv.Itoa(i)); err != nil || d.Verdict != coordinator.Probe {
			b.Fatal(d, err)
		}
	})
}

func BenchmarkSettle(b *testing.B) {
	ctx := context.Background()
	rdb := redistest.Start(b).Client(b)
	clock := coordinatortest.NewClock()
	c := New(rdb, WithClock(clock.Now))
	p := benchPolicy(10)
	gen := halfOpen(b, c, p, clock)
	// Leases for every settlement, written directly: claiming b.N slots
	// through Admit would cost O(b.N) each.
	k := scopeKeys(DefaultPrefix, "s")
	pipe := rdb.Pipeline()
	for i := range b.N {
		pipe.HSet(ctx, k[keyProbes], strconv.Itoa(i), clock.Now().Add(time.Hour).UnixMilli())
	}
	if _, err := pipe.Exec(ctx); err != nil {
		b.Fatal(err)
	}
	measure(b, rdb, func(i int) {
		if res, err := c.Settle(ctx, "s", p, strconv.Itoa(i), coordinator.Outcome{Generation: gen}); err != nil || res.Stale != 0 {
			b.Fatal(res, err)
		}
	})
}

// birth gives birth to scope "s" and returns its generation.
func birth(b *testing.B, c *Coordinator, p coordinator.Policy) uint64 {
	d, err := c.Admit(context.Background(), "s", p, "birth")
	if err != nil {
		b.Fatal(err)
	}
	return d.Generation
}

// halfOpen trips scope "s" and lets a first probe through.
func halfOpen(b *testing.B, c *Coordinator, p coordinator.Policy, clock *coordinatortest.Clock) uint64 {
	ctx := context.Background()
	gen := birth(b, c, p)
	oks, fails := make([]coordinator.Outcome, p.MinCalls), make([]coordinator.Outcome, p.MinCalls)
	for i := range fails {
		oks[i].Generation = gen
		fails[i] = coordinator.Outcome{Generation: gen, Failure: true}
	}
	if _, err := c.Record(ctx, "s", p, oks); err != nil {
		b.Fatal(err)
	}
	if res, err := c.Record(ctx, "s", p, fails); err != nil || res.State != coordinator.StateOpen {
		b.Fatal(res, err)
	}
	clock.Advance(p.OpenFor)
	d, err := c.Admit(ctx, "s", p, "first")
	if err != nil || d.Verdict != coordinator.Probe {
		b.Fatal(d, err)
	}
	return d.Generation
}
