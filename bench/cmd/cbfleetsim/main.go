// Command cbfleetsim simulates a fleet: N virtual replicas, each a real
// cbgrpc Breaker with its own go-redis client and Redis coordinator,
// calling S scopes at a fixed rate through the Breaker's unary interceptor
// to a stub dependency, against a redis-server (or a 3-master Redis
// Cluster) it starts on free loopback ports, a fresh one for each run. It
// reports what the fleet costs Redis per busy replica-scope-second, split
// into what each replica costs with no call (its feed's heartbeats) and
// what the calls cost; and, when the dependency fails, how many failing
// calls got through and how fast each trip reached every replica. A run
// that had to share the machine's cores says so in the log.
//
//	go run ./cmd/cbfleetsim -sizes 16x1,64x1,256x1,64x8 -duration 30s
//	go run ./cmd/cbfleetsim -sizes 16x8 -rate 20 -fail step -open-for 1s -duration 30s
//	go run ./cmd/cbfleetsim -replicas 64 -rate 20 -fail step -fail-share 0.1
//	go run ./cmd/cbfleetsim -cluster -sizes 64x8 -md fleet.md -json fleet.json
//	go run ./cmd/cbfleetsim -throttle-plot ../docs -throttle-consecutive 0
//
// With -throttle-plot DIR it runs the adaptive-throttling simulation
// instead (see [bench.RunThrottle]): 16 replicas at 10 calls a second, a
// dependency that serves 40% of that from 10 s to 30 s, Policy.Throttle 2,
// once fleet-wide and once per replica, then one that serves 5% of it
// fleet-wide, with the trip rules and with the throttle alone; it draws
// offered, admitted and accepted calls per second as
// DIR/throttle-fleet.svg, DIR/throttle-replica.svg and
// DIR/throttle-deep.svg (the throttle alone), and logs the means of each
// span and how long after the recovery each run admitted half, 90% and
// 99% of the offered calls again. -throttle-poisson spaces each replica's
// calls at random rather than at a fixed phase; -throttle-consecutive
// sets the policy's ConsecutiveFailures.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"runtime/pprof"
	"strconv"
	"strings"
	"time"

	"github.com/cbgrpc/cbgrpc/bench"
	"github.com/cbgrpc/cbgrpc/coordinator"
)

func main() {
	var (
		replicas = flag.Int("replicas", 16, "virtual replicas")
		scopes   = flag.Int("scopes", 1, "scopes each replica calls")
		sizes    = flag.String("sizes", "", "runs to make, as REPLICASxSCOPES separated by commas (16x1,64x8); overrides -replicas and -scopes")
		rate     = flag.Float64("rate", 100, "calls per second of each replica to each scope")
		warmup   = flag.Duration("warmup", 2*time.Second, "how long the fleet runs before the measurement")
		duration = flag.Duration("duration", 10*time.Second, "how long the measurement lasts")
		quiet    = flag.Duration("quiet", 5*time.Second, "how long the replicas are then measured with no call (their heartbeats); 0: not")
		fail     = flag.String("fail", "none", "the dependency: none, step (calls fail from -fail-at) or ramp (failures grow from 0 over -ramp from -fail-at)")
		share    = flag.Float64("fail-share", 1, "the share of calls that fail, in (0, 1], once -fail has started (and ramped up)")
		failAt   = flag.Duration("fail-at", 3*time.Second, "when failures start, from the start of the measurement")
		ramp     = flag.Duration("ramp", 5*time.Second, "how long the ramp of -fail ramp takes")
		interval = flag.Duration("record-interval", 0, "the Breaker's WithRecordInterval; 0 keeps its default")
		noCache  = flag.Bool("no-cache", false, "turn the admission cache off: every admission asks Redis")
		openFor  = flag.Duration("open-for", 0, "the policy's OpenFor (and no MaxOpenFor), for more trips in a run; 0 keeps the default policy")
		cluster  = flag.Bool("cluster", false, "run against a local 3-master Redis Cluster instead of one server")
		mdPath   = flag.String("md", "", "also write the tables as markdown here")
		jsonPath = flag.String("json", "", "write the rows as JSON here")
		profile  = flag.String("cpuprofile", "", "write the simulator's CPU profile here, to see where its cores go")
		plotDir  = flag.String("throttle-plot", "", "run the adaptive-throttling simulation instead, and write its plots into this directory")
		poisson  = flag.Bool("throttle-poisson", false, "with -throttle-plot, space each replica's calls at random instead of at a fixed phase")
		runOf    = flag.Int("throttle-consecutive", -1, "with -throttle-plot, the policy's ConsecutiveFailures; -1 keeps the default")
	)
	flag.Parse()
	if *plotDir != "" {
		if err := throttlePlots(context.Background(), *plotDir, *poisson, *runOf); err != nil {
			log.Fatal(err)
		}
		return
	}
	if *profile != "" {
		f, err := os.Create(*profile)
		if err != nil {
			log.Fatal(err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			log.Fatal(err)
		}
		defer pprof.StopCPUProfile()
	}
	runs, err := parseSizes(*sizes, *replicas, *scopes)
	if err != nil {
		log.Fatal(err)
	}
	if *share <= 0 || *share > 1 {
		log.Fatalf("-fail-share %v: want a share in (0, 1]", *share)
	}
	var failure bench.Failure
	switch *fail {
	case "none":
		failure = bench.NoFailure
	case "step":
		failure = bench.FailShare(*failAt, *share)
	case "ramp":
		failure = bench.FailRamp(*failAt, *ramp)
		failure.Share = *share
	default:
		log.Fatalf("-fail %q: want none, step or ramp", *fail)
	}
	var policy coordinator.Policy
	if *openFor > 0 {
		policy = coordinator.DefaultPolicy()
		policy.OpenFor, policy.MaxOpenFor = *openFor, 0
	}
	for i := range runs {
		runs[i].Rate, runs[i].Warmup, runs[i].Duration, runs[i].Quiet = *rate, *warmup, *duration, *quiet
		runs[i].Failure, runs[i].RecordInterval, runs[i].NoCache, runs[i].Policy = failure, *interval, *noCache, policy
	}
	if err := run(runs, *cluster, *mdPath, *jsonPath); err != nil {
		pprof.StopCPUProfile()
		log.Fatal(err)
	}
}

// parseSizes reads "16x1,64x8"; empty means one run of replicas×scopes.
func parseSizes(s string, replicas, scopes int) ([]bench.FleetConfig, error) {
	if s == "" {
		return []bench.FleetConfig{{Replicas: replicas, Scopes: scopes}}, nil
	}
	var runs []bench.FleetConfig
	for size := range strings.SplitSeq(s, ",") {
		r, sc, ok := strings.Cut(strings.TrimSpace(size), "x")
		n, err1 := strconv.Atoi(r)
		m, err2 := strconv.Atoi(sc)
		if !ok || err1 != nil || err2 != nil || n < 1 || m < 1 {
			return nil, fmt.Errorf("-sizes: %q is not REPLICASxSCOPES", size)
		}
		runs = append(runs, bench.FleetConfig{Replicas: n, Scopes: m})
	}
	return runs, nil
}

// run makes each run against a Redis of its own, started for it, so that
// no run pays for the keys and connections of another.
func run(runs []bench.FleetConfig, cluster bool, mdPath, jsonPath string) error {
	ctx := context.Background()
	var rows []bench.FleetRow
	for _, cfg := range runs {
		row, err := runOne(ctx, cfg, cluster)
		if err != nil {
			return fmt.Errorf("%dx%d: %w", cfg.Replicas, cfg.Scopes, err)
		}
		log.Printf("%dx%d: %.1f µs of Redis CPU per replica-scope-second (%.1f net of idle: calls %.1f, replicas' heartbeats %.1f; Redis %.2f cores, simulator %.2f), %.1f s",
			cfg.Replicas, cfg.Scopes, row.RedisMicros, row.RedisNetMicros, row.ScopeCPUMicros, row.ReplicaCPUMicrosPerRSS,
			row.RedisCores, row.ClientCores, row.WallSeconds)
		if row.CallsPerRSS < 0.95*cfg.Rate || row.SlowCalls > 0 || row.CoordinatorErrors > 0 || row.OtherCores > 0.5 {
			log.Printf("%dx%d: the machine was short of cores: %.1f of %.0f calls per replica-scope-second, %d slow and %d failed coordinator calls, %.2f cores used by other processes",
				cfg.Replicas, cfg.Scopes, row.CallsPerRSS, cfg.Rate, row.SlowCalls, row.CoordinatorErrors, row.OtherCores)
		}
		rows = append(rows, row)
	}
	if err := bench.WriteFleetText(os.Stdout, rows); err != nil {
		return err
	}
	if mdPath != "" {
		if err := bench.WriteFile(mdPath, func(w io.Writer) error { return bench.WriteFleetMarkdown(w, rows) }); err != nil {
			return err
		}
	}
	if jsonPath != "" {
		if err := bench.WriteFile(jsonPath, func(w io.Writer) error { return bench.WriteJSON(w, rows) }); err != nil {
			return err
		}
	}
	return nil
}

func runOne(ctx context.Context, cfg bench.FleetConfig, cluster bool) (bench.FleetRow, error) {
	if cluster {
		c, err := bench.StartCluster()
		if err != nil {
			return bench.FleetRow{}, err
		}
		defer c.Stop()
		return bench.RunFleet(ctx, c.Target(), cfg)
	}
	r, err := bench.StartRedis()
	if err != nil {
		return bench.FleetRow{}, err
	}
	defer r.Stop()
	return bench.RunFleet(ctx, r.Target(), cfg)
}
