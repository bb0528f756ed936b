package bench

import (
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/cbgrpc/cbgrpc/coordinator"
)

// TestFleetSmoke runs the fleet simulator briefly, at a tiny size, with a
// dependency that fails from the start of the measurement: every figure
// is there and within what the run itself bounds.
func TestFleetSmoke(t *testing.T) {
	requireRedis(t)
	r, err := StartRedis()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Stop()
	// A short record interval: replicas start one after another over one.
	cfg := FleetConfig{Replicas: 4, Scopes: 2, Rate: 50, Warmup: 500 * time.Millisecond, Duration: 2 * time.Second,
		RecordInterval: 200 * time.Millisecond, Failure: FailFrom(0), Quiet: time.Second}
	row, err := RunFleet(context.Background(), r.Target(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%+v", row)
	checkCost(t, cfg, row, 1)
	// Failures go to Redis at once, a Record each at most.
	if row.ScriptsPerRSS > row.CallsPerRSS {
		t.Errorf("%.2f scripts per replica-scope-second for %.1f calls: want at most one per call", row.ScriptsPerRSS, row.CallsPerRSS)
	}

	// The trip needed a run of ConsecutiveFailures failures (or, by the
	// ratio, at least MinCalls and as many as the warm-up's successes);
	// every failure it counted was absorbed before the replicas rejected.
	p := coordinator.DefaultPolicy()
	minCalls := float64(min(p.MinCalls, p.ConsecutiveFailures))
	if row.Trips < cfg.Scopes || row.Unheard != 0 {
		t.Errorf("%d trips, %d not heard by every replica: want every scope tripped and heard", row.Trips, row.Unheard)
	}
	if row.StoppedScopes != cfg.Scopes || row.UnstoppedScopes != 0 {
		t.Errorf("%d scopes rejected by every replica, %d not: want all %d", row.StoppedScopes, row.UnstoppedScopes, cfg.Scopes)
	}
	if row.NeededPerScope < minCalls || row.AbsorbedPerScope < row.NeededPerScope {
		t.Errorf("absorbed %.1f failing calls per scope, window failures at the trip %.1f: want %v <= window <= absorbed",
			row.AbsorbedPerScope, row.NeededPerScope, minCalls)
	}
	// A replica hears of a trip within a round trip (the feed, or its own
	// Record's answer: failures go at once), a call or two at this rate;
	// a fifth of a second's calls leaves room for a loaded machine.
	if limit := cfg.Rate / 5; row.ExcessPerReplica > limit {
		t.Errorf("%.1f failing calls per replica beyond the window's: want at most %.0f", row.ExcessPerReplica, limit)
	}
	if row.PropagationP50 < 0 || row.PropagationP50 > row.PropagationP99 || row.PropagationP99 > row.PropagationMax ||
		row.PropagationMax <= 0 || row.PropagationMax > 1e6 {
		t.Errorf("propagation p50 %.0f µs, p99 %.0f µs, max %.0f µs: want 0 <= p50 <= p99 <= max, 0 < max <= 1 s",
			row.PropagationP50, row.PropagationP99, row.PropagationMax)
	}
	if row.Rejected == 0 || row.Failed == 0 || row.Failed >= row.Calls {
		t.Errorf("%d calls, %d failed, %d rejected: want failures, then rejections", row.Calls, row.Failed, row.Rejected)
	}
}

// TestFleetSmokeCluster runs the simulator briefly against a local Redis
// Cluster with a healthy dependency.
func TestFleetSmokeCluster(t *testing.T) {
	requireRedis(t)
	c, err := StartCluster()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Stop()
	cfg := FleetConfig{Replicas: 4, Scopes: 4, Rate: 50, Warmup: 300 * time.Millisecond, Duration: 2 * time.Second,
		RecordInterval: 200 * time.Millisecond, Quiet: 500 * time.Millisecond}
	row, err := RunFleet(context.Background(), c.Target(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%+v", row)
	checkCost(t, cfg, row, len(c.Nodes))
	if row.Trips != 0 || row.Failed != 0 || row.Rejected != 0 {
		t.Errorf("a healthy dependency: %d trips, %d failed, %d rejected calls", row.Trips, row.Failed, row.Rejected)
	}
	// With the cache, admissions are local, and the successes of a calm
	// scope go in one Record per calm interval: five record intervals, a
	// sixth of the window at most (the root package's pace.go).
	// Two seconds hold one or two calm intervals of a replica-scope,
	// depending on where its Records fall; without the pacing there would
	// be five Records a second.
	calm := min(5*cfg.RecordInterval, coordinator.DefaultPolicy().Window/6)
	perSecond := float64(time.Second) / float64(calm)
	if row.AdmitsPerRSS > row.RecordsPerRSS || row.RecordsPerRSS < perSecond/4 || row.RecordsPerRSS > perSecond*1.5 {
		t.Errorf("%.2f Admits and %.2f Records per replica-scope-second: want about %.1f Records, one per calm interval (%v), and fewer Admits",
			row.AdmitsPerRSS, row.RecordsPerRSS, perSecond, calm)
	}
	// Counted at either end of the same seconds, whose boundaries differ:
	// calm Records come in bursts, one per replica-scope per calm interval,
	// and one such burst may fall on either side (a loaded CI host saw
	// 0.69 scripts for 0.84 Records).
	if row.ScriptsPerRSS < row.RecordsPerRSS-1/row.Seconds {
		t.Errorf("Redis ran %.2f scripts per replica-scope-second, the replicas sent %.2f Records", row.ScriptsPerRSS, row.RecordsPerRSS)
	}
}

// checkCost checks the cost figures of a run with the admission cache on,
// against a target of nodes masters.
func checkCost(t *testing.T, cfg FleetConfig, row FleetRow, nodes int) {
	t.Helper()
	if row.CallsPerRSS <= 0 || row.CallsPerRSS > cfg.Rate*1.1 {
		t.Errorf("%.1f calls per replica-scope-second, want up to the rate, %v", row.CallsPerRSS, cfg.Rate)
	}
	if row.RedisMicros <= 0 || row.RedisCores <= 0 || row.RedisCores > float64(runtime.NumCPU()) {
		t.Errorf("Redis CPU: %.1f µs per replica-scope-second, %.2f cores: want some, and no more than the machine has", row.RedisMicros, row.RedisCores)
	}
	if row.ClientCores <= 0 || row.ClientCores > float64(runtime.NumCPU()) {
		t.Errorf("the simulator used %.2f cores", row.ClientCores)
	}
	if row.ScriptsPerRSS <= 0 || row.ScriptMicros <= 0 || row.RecordsPerRSS <= 0 {
		t.Errorf("%.2f scripts per replica-scope-second of %.1f µs each, %.2f Records: want some", row.ScriptsPerRSS, row.ScriptMicros, row.RecordsPerRSS)
	}
	if row.CoordinatorP50 <= 0 || row.CoordinatorP99 < row.CoordinatorP50 {
		t.Errorf("coordinator calls p50 %.0f µs, p99 %.0f µs", row.CoordinatorP50, row.CoordinatorP99)
	}
	if row.KeysPerScope <= 0 || row.KeyBytesPerScope <= 0 || row.ClientMemoryPerReplica <= 0 {
		t.Errorf("memory: %.1f keys of %.0f bytes per scope, %.0f bytes of client buffers per replica: want some",
			row.KeysPerScope, row.KeyBytesPerScope, row.ClientMemoryPerReplica)
	}
	if row.Undelivered < 0 || row.Undelivered > row.Calls-row.Rejected {
		t.Errorf("%d outcomes undelivered of %d admitted calls", row.Undelivered, row.Calls-row.Rejected)
	}
	if row.PublishesPerSecond <= 0 {
		t.Errorf("%.1f publishes per second: the feeds' heartbeats are missing", row.PublishesPerSecond)
	}
	// Per node that serves a followed scope, one heartbeat a period (two
	// a second) from the whole fleet, two when two publish at once; a
	// heartbeat per replica would be as many times more as there are
	// replicas.
	fleet := func(perReplica float64) float64 { return perReplica * float64(cfg.Replicas) }
	if hb, most := fleet(row.HeartbeatsPerReplicaSecond), 4*float64(min(nodes, cfg.Scopes)); hb < 1 || hb > most {
		t.Errorf("%.2f heartbeats per second from the fleet: want 1 to %.0f", hb, most)
	}
	// Quiet, the replicas send heartbeats and no script. (What that costs
	// a tiny fleet is within the noise of the server's idle cost.)
	if hb := fleet(row.QuietHeartbeatsPerReplicaSecond); row.QuietSeconds < cfg.Quiet.Seconds() || row.QuietScripts != 0 || hb < 1 {
		t.Errorf("quiet for %.2f s: %d scripts, %.2f heartbeats per second from the fleet: want %v, none, at least 1",
			row.QuietSeconds, row.QuietScripts, hb, cfg.Quiet)
	}
	// A command connection and a subscription at least; per node, no
	// more command connections than Records, a heartbeat and a read of
	// the shared policy's overrides in flight.
	if most := nodes * (cfg.Scopes + 3); row.ClientsPerReplica < 1.5 || row.ClientsPerReplica > float64(most) {
		t.Errorf("%.1f connections per replica: want 2 to %d", row.ClientsPerReplica, most)
	}
}
