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
	if _, err := c.Record(ctx, coordinator.RecordRequest{Scope: "s", Policy: p, Outcomes: []coordinator.Outcome{{Generation: birth(b, c, p)}}}); err != nil {
		b.Fatal(err)
	}
	measure(b, rdb, func(i int) {
		if _, err := c.Admit(ctx, coordinator.AdmitRequest{Scope: "s", Policy: p, Claim: "claim"}); err != nil {
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
					c.Record(ctx, coordinator.RecordRequest{Scope: "s", Policy: p, Outcomes: outcomes, BatchID: fmt.Sprint("warm", i)})
				}
				measure(b, rdb, func(i int) {
					clock.Advance(p.BucketWidth())
					res, err := c.Record(ctx, coordinator.RecordRequest{Scope: "s", Policy: p, Outcomes: outcomes, BatchID: strconv.Itoa(i)})
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
		res, err := c.Record(ctx, coordinator.RecordRequest{Scope: "s", Policy: p, Outcomes: outcomes, BatchID: strconv.Itoa(i)})
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
		if d, err := c.Admit(ctx, coordinator.AdmitRequest{Scope: "s", Policy: p, Claim: strconv.Itoa(i)}); err != nil || d.Verdict != coordinator.Probe {
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
		if res, err := c.Settle(ctx, coordinator.SettleRequest{Scope: "s", Policy: p, Claim: strconv.Itoa(i), Outcome: coordinator.Outcome{Generation: gen}}); err != nil || res.Stale != 0 {
			b.Fatal(res, err)
		}
	})
}

// birth gives birth to scope "s" and returns its generation.
func birth(b *testing.B, c *Coordinator, p coordinator.Policy) uint64 {
	d, err := c.Admit(context.Background(), coordinator.AdmitRequest{Scope: "s", Policy: p, Claim: "birth"})
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
	if _, err := c.Record(ctx, coordinator.RecordRequest{Scope: "s", Policy: p, Outcomes: oks}); err != nil {
		b.Fatal(err)
	}
	if res, err := c.Record(ctx, coordinator.RecordRequest{Scope: "s", Policy: p, Outcomes: fails}); err != nil || res.State != coordinator.StateOpen {
		b.Fatal(res, err)
	}
	clock.Advance(p.OpenFor)
	d, err := c.Admit(ctx, coordinator.AdmitRequest{Scope: "s", Policy: p, Claim: "first"})
	if err != nil || d.Verdict != coordinator.Probe {
		b.Fatal(d, err)
	}
	return d.Generation
}

// BenchmarkHeartbeat measures what heartbeats add to the Redis side of a
// feed: 100 subscriptions without heartbeats, then 100 Watches following a
// scope each, for b.N heartbeat periods each, on one server and on a
// Cluster. It reports, per Watch and second, the Redis CPU they add (INFO
// cpu), the execution time of the heartbeat scripts (INFO commandstats,
// EVALSHA and EVAL, the PUBLISH inside included) and how many the Watches
// sent.
//
//	go test -run XXX -bench Heartbeat -benchtime 20x ./coordinator/redis
func BenchmarkHeartbeat(b *testing.B) {
	b.Run("server", func(b *testing.B) {
		srv := redistest.Start(b)
		benchmarkHeartbeat(b, srv.Client(b), srv)
	})
	b.Run("cluster", func(b *testing.B) {
		cluster := redistest.StartCluster(b)
		benchmarkHeartbeat(b, cluster.Client(b), cluster.Nodes...)
	})
}

// benchmarkHeartbeat measures the heartbeats of Watches of rdb on nodes.
func benchmarkHeartbeat(b *testing.B, rdb goredis.UniversalClient, nodes ...*redistest.Server) {
	const watches = 100
	ctx := context.Background()
	c := New(rdb)
	var admins []*goredis.Client
	for _, n := range nodes {
		admins = append(admins, n.Client(b))
	}
	period := time.Duration(b.N) * heartbeatEvery
	// run holds watches subscriptions open for a period and returns the
	// Redis CPU spent meanwhile, in µs.
	run := func(open func(i int) func() error) float64 {
		for i := range watches {
			defer open(i)()
		}
		// Past every subscription's first heartbeat.
		time.Sleep(heartbeatEvery)
		before := 0.0
		for _, a := range admins {
			if err := a.ConfigResetStat(ctx).Err(); err != nil {
				b.Fatal(err)
			}
			before += redisCPU(b, a)
		}
		time.Sleep(period)
		spent := -before
		for _, a := range admins {
			spent += redisCPU(b, a)
		}
		return spent
	}
	b.ResetTimer()
	plain := run(func(i int) func() error {
		ch := fmt.Sprint("plain", i)
		ps := subscribeLike(b, ctx, c, rdb, ch)
		if _, err := ps.Receive(ctx); err != nil {
			b.Fatal(err)
		}
		return ps.Close
	})
	beating := run(func(i int) func() error {
		w, err := c.Watch(ctx)
		if err == nil {
			err = w.Follow(ctx, fmt.Sprint("s", i))
		}
		if err != nil {
			b.Fatal(err)
		}
		return w.Close
	})
	var calls, usec int64
	for _, a := range admins {
		for _, cmd := range []string{"evalsha", "eval"} {
			n, us := commandStats(b, a, cmd)
			calls, usec = calls+n, usec+us
		}
	}
	b.StopTimer()
	watchSeconds := watches * period.Seconds()
	b.ReportMetric((beating-plain)/watchSeconds, "cpu-µs/watch-s")
	b.ReportMetric(float64(usec)/watchSeconds, "script-µs/watch-s")
	b.ReportMetric(float64(calls)/watchSeconds, "cmds/watch-s")
	b.ReportMetric(0, "ns/op")
}

// redisCPU returns the CPU time the server has used, in µs.
func redisCPU(b *testing.B, rdb *goredis.Client) float64 {
	info, err := rdb.InfoMap(context.Background(), "cpu").Result()
	if err != nil {
		b.Fatal(err)
	}
	var us float64
	for _, k := range []string{"used_cpu_sys", "used_cpu_user"} {
		s, err := strconv.ParseFloat(info["CPU"][k], 64)
		if err != nil {
			b.Fatalf("INFO cpu %s: %v", k, err)
		}
		us += s * 1e6
	}
	return us
}

// commandStats returns the calls of cmd and the µs spent in them since
// the statistics were reset.
func commandStats(b testing.TB, rdb *goredis.Client, cmd string) (calls, usec int64) {
	info, err := rdb.InfoMap(context.Background(), "commandstats").Result()
	if err != nil {
		b.Fatal(err)
	}
	for kv := range strings.SplitSeq(info["Commandstats"]["cmdstat_"+cmd], ",") {
		k, v, _ := strings.Cut(kv, "=")
		n, _ := strconv.ParseInt(v, 10, 64)
		switch k {
		case "calls":
			calls = n
		case "usec":
			usec = n
		}
	}
	return calls, usec
}
