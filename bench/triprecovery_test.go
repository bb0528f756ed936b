package bench

import (
	"strings"
	"testing"
	"time"

	"github.com/cbgrpc/cbgrpc/coordinator"
)

// TestTripRecoverySmoke takes a small fleet down, lets the dependency
// recover, and takes it down again, and checks the counting only, not
// how fast cbgrpc recovers: the local peers, open 60 s, never serve again
// and see the relapse at once, having sent nothing into the dead
// dependency since they stopped; cbgrpc, opening briefly here, has sent
// its probes, and they are counted.
func TestTripRecoverySmoke(t *testing.T) {
	p := coordinator.DefaultPolicy()
	// Open periods short and fixed, so that cbgrpc probes within the
	// outage whatever the default policy does.
	p.OpenFor, p.MaxOpenFor = 200*time.Millisecond, 0
	const down = 2 * time.Second
	row := runTrip(t, TripConfig{Replicas: 3, Rate: 50, Spell: time.Second, Down: down, Recover: 3 * time.Second, Relapse: time.Second,
		Stagger: 20 * time.Millisecond, Policy: p, Peers: true})
	r := row.Recovery
	if row.LastStopped < 0 || r.Probes < 1 || r.Calls == 0 || r.Relapse.LastStopped < 0 {
		t.Errorf("cbgrpc: last stopped %v, %d probes, %d calls after the recovery, last stopped again %v; want stopped, probes, calls, and stopped again",
			row.LastStopped, r.Probes, r.Calls, r.Relapse.LastStopped)
	}
	if want := float64(r.Probes) / (down - row.LastStopped).Seconds(); r.ProbesPerSecond != want {
		t.Errorf("cbgrpc: %v probes a second; want %v, %d over %v", r.ProbesPerSecond, want, r.Probes, down-row.LastStopped)
	}
	for _, b := range row.Peers {
		r := b.Recovery
		if b.LastStopped < 0 || r.FirstServed >= 0 || r.Probes != 0 || r.Calls == 0 || r.Rejected != r.Calls {
			t.Errorf("%s: last stopped %v, first served %v, %d probes, %d of %d calls rejected after the recovery; want stopped, never served, no probe, every call rejected",
				b.Breaker, b.LastStopped, r.FirstServed, r.Probes, r.Rejected, r.Calls)
		}
		if r.Relapse.LastStopped < 0 || r.Relapse.Absorbed != 0 {
			t.Errorf("%s: last stopped again %v, %d absorbed in the relapse; want every replica stopped at once, none", b.Breaker, r.Relapse.LastStopped, r.Relapse.Absorbed)
		}
	}
}

// TestTripRecoveryConfig names the wrong field of a recovery that cannot
// be run.
func TestTripRecoveryConfig(t *testing.T) {
	base := TripConfig{Replicas: 2, Rate: 50, Spell: time.Second, Down: time.Second, Recover: time.Second}
	for _, c := range []struct {
		field string
		edit  func(*TripConfig)
	}{
		{"Recover", func(c *TripConfig) { c.Recover = -time.Second }},
		{"Recover", func(c *TripConfig) { c.Down = 0 }},
		{"Relapse", func(c *TripConfig) { c.Relapse = -time.Second }},
		{"Relapse", func(c *TripConfig) { c.Recover, c.Relapse = 0, time.Second }},
	} {
		cfg := base
		c.edit(&cfg)
		if err := cfg.validate(); err == nil || !strings.HasPrefix(err.Error(), "trip: "+c.field+" ") {
			t.Errorf("%+v: %v; want an error naming %s", cfg, err, c.field)
		}
	}
	if err := base.validate(); err != nil {
		t.Errorf("a recovery: %v", err)
	}
}
