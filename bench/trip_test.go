package bench

import (
	"context"
	"testing"
	"time"

	"github.com/cbgrpc/cbgrpc/coordinator"
)

// TestTripSmoke runs the trip simulator briefly: a small fleet whose
// dependency goes down after a healthy spell stops calling it, and a
// replica failing alone in a tight loop beside healthy ones rejects its
// own calls after its own run of failures, with no healthy call rejected.
func TestTripSmoke(t *testing.T) {
	run := func(cfg TripConfig) TripRow { return runTrip(t, cfg) }
	p := coordinator.DefaultPolicy()

	// Eight replicas: the fleet's run must hold without its most failing
	// replica, an eighth of it.
	down := run(TripConfig{Replicas: 8, Rate: 50, Spell: time.Second, Down: 2 * time.Second, Stagger: 20 * time.Millisecond})
	if down.LastStopped < 0 || down.HealthyRejected != 0 || len(down.Trips) == 0 {
		t.Errorf("onset: last stopped %v, %d healthy calls rejected, trips %q; want every replica stopped, none rejected before, a trip",
			down.LastStopped, down.HealthyRejected, down.Trips)
	}
	if bound := int64(p.MinCalls + 3*8); down.Absorbed < int64(p.ConsecutiveFailures) || down.Absorbed > bound {
		t.Errorf("onset: %d failing calls absorbed; want %d to %d", down.Absorbed, p.ConsecutiveFailures, bound)
	}

	alone := run(TripConfig{Replicas: 3, Rate: 50, Spell: 2 * time.Second, Bad: 1})
	if alone.HealthyRejected != 0 || len(alone.Trips) != 0 {
		t.Errorf("alone: %d healthy calls rejected, trips %q; want none", alone.HealthyRejected, alone.Trips)
	}
	if len(alone.BadFailures) != 1 || alone.BadFailures[0] != int64(p.ConsecutiveFailures) || len(alone.Outliers) == 0 {
		t.Errorf("alone: the bad replica failed %v calls before it rejected, outlier verdicts %q; want %d, and a verdict",
			alone.BadFailures, alone.Outliers, p.ConsecutiveFailures)
	}
}

// runTrip makes one run on a redis-server of its own.
func runTrip(t *testing.T, cfg TripConfig) TripRow {
	t.Helper()
	requireRedis(t)
	r, err := StartRedis()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Stop()
	row, err := RunTrip(context.Background(), r.Target(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%+v", row)
	return row
}

// TestTripPeersSmoke runs the peers beside cbgrpc through a full outage
// after a healthy spell: every replica's gobreaker stops after its run of
// 6 failures, and every failsafe-go once the failures are half of its last
// 100 calls, the spell's 100 successes among them.
func TestTripPeersSmoke(t *testing.T) {
	const replicas = 4
	row := runTrip(t, TripConfig{Replicas: replicas, Rate: 50, Spell: 2 * time.Second, Down: 2 * time.Second, Peers: true})
	if row.Breaker != "cbgrpc" || len(row.Peers) != 2 {
		t.Fatalf("rows of %q and %d peers; want cbgrpc's and 2", row.Breaker, len(row.Peers))
	}
	for i, absorbed := range []int64{6 * replicas, 50 * replicas} {
		p := row.Peers[i]
		if p.LastStopped < 0 || p.Absorbed != absorbed || p.HealthyRejected != 0 || p.HealthyCalls < replicas*50*3 {
			t.Errorf("%s: last stopped %v, absorbed %d, %d of %d healthy calls rejected; want every replica stopped, %d absorbed, none rejected of about %d",
				p.Breaker, p.LastStopped, p.Absorbed, p.HealthyRejected, p.HealthyCalls, absorbed, replicas*50*4)
		}
	}
}

// TestTripLatencyBrownoutSmoke makes 60 % of the calls slow: the replicas
// keep their rate, since a slow call does not hold up the next, and the
// slow calls served count as absorbed.
func TestTripLatencyBrownoutSmoke(t *testing.T) {
	p := coordinator.DefaultPolicy()
	p.SlowCallDuration, p.SlowCallRatio = 100*time.Millisecond, 0.5
	row := runTrip(t, TripConfig{Replicas: 2, Rate: 50, Spell: time.Second, Down: 2 * time.Second, SlowShare: 0.6, SlowBy: 150 * time.Millisecond, Policy: p})
	if want := int64(2 * 50 * 3 * 9 / 10); row.HealthyCalls < want {
		t.Errorf("%d calls; want at least %d, the replicas' rate", row.HealthyCalls, want)
	}
	if row.Absorbed == 0 || len(row.Peers) != 0 {
		t.Errorf("%d slow calls absorbed, %d peer rows; want some, and no peers", row.Absorbed, len(row.Peers))
	}
}

// TestTripRestartSmoke restarts a bad replica in a tight loop: each start
// is a new breaker, so a local gobreaker lets through its run of 6 failures
// at every start, and no local breaker rejects a healthy replica's call.
// What cbgrpc's fleet rules make of the new replica IDs is cbtripsim's to
// measure.
func TestTripRestartSmoke(t *testing.T) {
	// Not a divisor of the spell: the last start has time for its run.
	row := runTrip(t, TripConfig{Replicas: 3, Rate: 50, Spell: 2 * time.Second, Bad: 1, BadRestart: 600 * time.Millisecond, Peers: true})
	if row.BadStarts != 4 {
		t.Errorf("cbgrpc: %d starts; want 4", row.BadStarts)
	}
	// Each new ID is an outlier of its own, and the ones it replaced spend
	// nothing of the fleet's budget: the fleet never trips.
	if row.HealthyRejected != 0 || len(row.Trips) != 0 {
		t.Errorf("cbgrpc: %d healthy calls rejected, trips %q; want none", row.HealthyRejected, row.Trips)
	}
	for _, b := range row.Peers {
		if b.BadStarts != 4 || b.HealthyRejected != 0 {
			t.Errorf("%s: %d starts, %d healthy calls rejected; want 4 and none", b.Breaker, b.BadStarts, b.HealthyRejected)
		}
	}
	if g := row.Peers[0]; len(g.BadFailures) != 1 || g.BadFailures[0] != 6*g.BadStarts {
		t.Errorf("%s: the bad replica failed %v calls before rejecting, over %d starts; want 6 a start", g.Breaker, g.BadFailures, g.BadStarts)
	}
}

// TestTripZoneSmoke takes one replica of three down: its local breakers
// stop and the others' never do, having met only successes.
func TestTripZoneSmoke(t *testing.T) {
	row := runTrip(t, TripConfig{Replicas: 3, Rate: 50, Spell: time.Second, Down: 2 * time.Second, DownReplicas: 1, Peers: true})
	for _, p := range row.Peers {
		if p.FirstStopped < 0 || p.LastStopped >= 0 || p.SparedRejected != 0 {
			t.Errorf("%s: stopped %v / %v, %d calls outside the zone rejected; want the zone's replica stopped, not the others",
				p.Breaker, p.FirstStopped, p.LastStopped, p.SparedRejected)
		}
	}
}
