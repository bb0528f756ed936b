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
	requireRedis(t)
	run := func(cfg TripConfig) TripRow {
		t.Helper()
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
