package bench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/cbgrpc/cbgrpc"
	"github.com/cbgrpc/cbgrpc/coordinator"
)

// FleetConfig is one run of the fleet simulator: Replicas virtual
// replicas, each calling each of Scopes scopes Rate times a second.
type FleetConfig struct {
	Replicas int
	Scopes   int
	Rate     float64 // calls per second of each replica to each scope
	// Warmup runs the fleet before the measurement starts: replicas
	// subscribe, scripts load, windows and batches fill. It begins once
	// every replica started: they start one after another over a record
	// interval.
	Warmup   time.Duration
	Duration time.Duration // measured
	Failure  Failure
	// RecordInterval is the Breaker's WithRecordInterval; 0 keeps its
	// default.
	RecordInterval time.Duration
	// NoCache turns the Breaker's admission cache off: every admission
	// asks Redis.
	NoCache bool
	// Policy is every Breaker's policy; the zero Policy means
	// coordinator.DefaultPolicy.
	Policy coordinator.Policy
	// Quiet, when positive, measures what the replicas cost Redis with no
	// call, for that long after the measurement, once the last batches
	// have gone: the feeds' heartbeats, which a replica sends whether it
	// calls or not, and its connections.
	Quiet time.Duration
}

// recordInterval is the Breakers' record interval.
func (cfg FleetConfig) recordInterval() time.Duration {
	if cfg.RecordInterval > 0 {
		return cfg.RecordInterval
	}
	return cbgrpc.DefaultRecordInterval
}

// flushedWithin is the longest a Breaker holds a success: the calm
// interval, five record intervals and a sixth of the window at most (the
// root package's pace.go).
func (cfg FleetConfig) flushedWithin() time.Duration {
	ri := cfg.recordInterval()
	return max(ri, min(5*ri, cfg.Policy.Window/6))
}

const (
	// idleWindow is how long the servers' idle CPU is measured.
	idleWindow = time.Second
	// grace lets the feeds deliver the trips made just before the end of
	// the measurement.
	grace = 200 * time.Millisecond
)

// RunFleet runs a fleet against target and measures it. The target's
// servers must be private to the run and fresh: their INFO is read as the
// fleet's cost, and every key as the fleet's.
func RunFleet(ctx context.Context, target Target, cfg FleetConfig) (FleetRow, error) {
	if cfg.Replicas < 1 || cfg.Scopes < 1 || cfg.Rate <= 0 || cfg.Duration <= 0 || cfg.Warmup < 0 || cfg.Quiet < 0 {
		return FleetRow{}, fmt.Errorf("fleet: want replicas, scopes, rate and duration > 0 and warm-up and quiet >= 0, have %+v", cfg)
	}
	if cfg.Policy == (coordinator.Policy{}) {
		cfg.Policy = coordinator.DefaultPolicy()
	}
	began := time.Now()
	servers := target.servers()
	defer func() {
		for _, s := range servers {
			s.Close()
		}
	}()
	if err := primeScripts(ctx, target, servers); err != nil {
		return FleetRow{}, err
	}
	// What the servers cost with no fleet: their periodic tasks
	// (serverCron, hz 10) are a fixed cost that a small fleet's figure
	// would carry.
	empty, err := readStats(ctx, servers)
	if err != nil {
		return FleetRow{}, err
	}
	sleep(ctx, idleWindow)
	idle, err := readStats(ctx, servers)
	if err != nil {
		return FleetRow{}, err
	}

	f, err := startFleet(ctx, target, cfg)
	defer f.close()
	if err != nil {
		return FleetRow{}, err
	}
	sleep(ctx, time.Until(f.measured))
	before, err := f.sample(ctx, servers)
	if err != nil {
		return FleetRow{}, err
	}
	sleep(ctx, cfg.Duration)
	after, err := f.sample(ctx, servers)
	if err != nil {
		return FleetRow{}, err
	}
	if err := ctx.Err(); err != nil {
		return FleetRow{}, err
	}
	sleep(ctx, grace)
	f.stopCalling()
	end := fleetEnd{trips: f.obs.results(after.at, f.replicas), firstError: firstError(f.replicas), empty: empty}
	if cfg.Quiet > 0 {
		// A Breaker flushes what it holds within a calm interval; it
		// follows its scopes, and its feed beats, for a window more.
		sleep(ctx, cfg.flushedWithin()+grace)
		if end.quiet[0], err = f.sample(ctx, servers); err != nil {
			return FleetRow{}, err
		}
		sleep(ctx, cfg.Quiet)
		if end.quiet[1], err = f.sample(ctx, servers); err != nil {
			return FleetRow{}, err
		}
	}
	replicas := f.replicas
	f.close()
	// Counted once every Breaker flushed what it held.
	end.totals = sumCounts(replicas)

	if end.keys, end.keyBytes, err = keyMemory(ctx, servers); err != nil {
		return FleetRow{}, err
	}
	end.idleCores = (idle.cpu - empty.cpu) / idleWindow.Seconds()
	row := newFleetRow(cfg, target, before, after, end)
	row.WallSeconds = time.Since(began).Seconds()
	return row, nil
}

// fleet is the replicas of a run, calling.
type fleet struct {
	replicas []*replica
	obs      *observer
	latency  *latencies
	sent     *commandCounter // what the replicas' clients sent
	// measured is when the measurement is planned to start, from which
	// the failure pattern counts.
	measured time.Time
	stop     context.CancelFunc
	callers  sync.WaitGroup
}

// startFleet makes the replicas and starts them calling. The replicas
// start one after another over a record interval, as a fleet's replicas
// start at different times, so that each Breaker's recorder ticks in its
// own phase: started together, every replica would send its Records in the
// same millisecond of each second, and the last of the queue would wait
// for all the others in Redis.
func startFleet(ctx context.Context, target Target, cfg FleetConfig) (*fleet, error) {
	opts := []cbgrpc.Option{cbgrpc.WithPolicy(cfg.Policy)}
	spread := cfg.recordInterval()
	if cfg.RecordInterval > 0 {
		opts = append(opts, cbgrpc.WithRecordInterval(cfg.RecordInterval))
	}
	if cfg.NoCache {
		opts = append(opts, cbgrpc.WithAdmissionCache(0))
	}
	runCtx, stop := context.WithCancel(ctx)
	f := &fleet{obs: newObserver(cfg.Replicas), latency: &latencies{}, sent: &commandCounter{}, stop: stop,
		measured: time.Now().Add(spread + cfg.Warmup)}
	period := time.Duration(float64(time.Second) / cfg.Rate)
	created := time.Now()
	for i := range cfg.Replicas {
		sleep(ctx, time.Until(created.Add(spread*time.Duration(i)/time.Duration(cfg.Replicas))))
		r, err := newReplica(f, i, target, cfg, opts)
		if err != nil {
			return f, fmt.Errorf("replica %d: %w", i, err)
		}
		f.replicas = append(f.replicas, r)
		offset := rand.N(period)
		f.callers.Go(func() { r.run(runCtx, period, offset) })
	}
	return f, nil
}

// sample is what the simulator reads at either end of the measurement.
type sample struct {
	at      time.Time
	stats   serverStats
	client  time.Duration // this process's CPU
	machine time.Duration // every process's CPU
	counts  fleetCounts
	sent    sentCounts
	latency [32]int64
}

// sentCounts are the scripts of the calls and the heartbeats the
// replicas' clients sent.
type sentCounts struct{ scripts, heartbeats int64 }

func (f *fleet) sample(ctx context.Context, servers []*goredis.Client) (sample, error) {
	stats, err := readStats(ctx, servers)
	return sample{at: time.Now(), stats: stats, client: processCPU(), machine: machineCPU(),
		counts: sumCounts(f.replicas), latency: f.latency.counts(),
		sent: sentCounts{f.sent.scripts.Load(), f.sent.heartbeats.Load()}}, err
}

// stopCalling stops the callers and waits for them.
func (f *fleet) stopCalling() {
	f.stop()
	f.callers.Wait()
}

// close stops the callers, then flushes and closes every replica.
func (f *fleet) close() {
	f.stopCalling()
	var wg sync.WaitGroup
	for _, r := range f.replicas {
		wg.Go(r.close)
	}
	wg.Wait()
	f.replicas = nil
}

// fleetCounts are the replicas' counters, summed.
type fleetCounts struct {
	calls, rejected, failed  int64
	admits, records, settles int64
	errors, slow, feedsLost  int64
	delivered                int64
}

func sumCounts(replicas []*replica) fleetCounts {
	var t fleetCounts
	for _, r := range replicas {
		for _, c := range r.counts {
			t.calls += c.calls.Load()
			t.rejected += c.rejected.Load()
			t.failed += c.failed.Load()
		}
		t.admits += r.admits.Load()
		t.records += r.records.Load()
		t.settles += r.settles.Load()
		t.errors += r.errors.Load()
		t.slow += r.slow.Load()
		t.feedsLost += r.feedsLost.Load()
		t.delivered += r.delivered.Load()
	}
	return t
}

// firstError returns the first coordinator error of the replica with
// the lowest id that had one.
func firstError(replicas []*replica) string {
	for _, r := range replicas {
		if err := r.firstError.Load(); err != nil {
			return fmt.Sprintf("replica %d: %v", r.id, *err)
		}
	}
	return ""
}

// sleep waits d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
