package bench

import (
	"math"
	"testing"
	"time"
)

// TestTripDependencySmoke draws many answers of the stub dependency and
// checks each share: a brownout fails its share, the noise's included; a
// ramp rises linearly; a zone spares the replicas outside it; a latency
// brownout slows its share and fails only the noise; a bad replica fails
// always; a recovered dependency fails the noise only, and a relapse is the
// outage again.
func TestTripDependencySmoke(t *testing.T) {
	base := TripConfig{Replicas: 4, Rate: 50, Noise: 0.05, Spell: time.Second, Down: 10 * time.Second}
	with := func(edit func(*TripConfig)) TripConfig {
		c := base
		edit(&c)
		return c
	}
	relapse := with(func(c *TripConfig) { c.Recover, c.Relapse = 2*time.Second, 4*time.Second })
	rampedRelapse := relapse
	rampedRelapse.Share, rampedRelapse.RampUp = 0.8, 4*time.Second
	for _, c := range []struct {
		name           string
		cfg            TripConfig
		replica        int
		since          time.Duration
		failing, slows float64
	}{
		{"healthy before down", base, 0, -time.Second, 0.05, 0},
		{"fully down", base, 3, time.Second, 1, 0},
		{"brownout", with(func(c *TripConfig) { c.Share = 0.6 }), 0, time.Second, 0.6, 0},
		{"brownout under the noise", with(func(c *TripConfig) { c.Share = 0.01 }), 0, time.Second, 0.05, 0},
		{"halfway up a ramp", with(func(c *TripConfig) { c.Share, c.RampUp = 0.8, 4*time.Second }), 0, 2 * time.Second, 0.4, 0},
		{"past a ramp", with(func(c *TripConfig) { c.RampUp = 4 * time.Second }), 0, 5 * time.Second, 1, 0},
		{"inside a zone", with(func(c *TripConfig) { c.Bad, c.DownReplicas = 1, 2 }), 2, time.Second, 1, 0},
		{"outside a zone", with(func(c *TripConfig) { c.Bad, c.DownReplicas = 1, 2 }), 3, time.Second, 0.05, 0},
		{"latency brownout", with(func(c *TripConfig) { c.SlowShare, c.SlowBy = 0.6, time.Second }), 0, time.Second, 0.05, 0.6},
		{"bad replica", with(func(c *TripConfig) { c.Bad = 1 }), 0, -time.Second, 1, 0},
		{"recovered", with(func(c *TripConfig) { c.Recover = 2 * time.Second }), 0, 11 * time.Second, 0.05, 0},
		{"relapsed", relapse, 0, 13 * time.Second, 1, 0},
		{"halfway up a relapse's ramp", rampedRelapse, 0, 14 * time.Second, 0.4, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			if err := c.cfg.validate(); err != nil {
				t.Fatal(err)
			}
			d := newTripDependency(c.cfg)
			const n = 20000
			var failing, slows int
			for range n {
				a := d.answer(c.replica, c.since)
				if a.fail {
					failing++
				}
				if a.slow > 0 {
					slows++
					if a.slow != c.cfg.SlowBy {
						t.Fatalf("a slow call takes %v; want SlowBy, %v", a.slow, c.cfg.SlowBy)
					}
				}
			}
			// Five standard deviations of a share of n draws at most.
			tolerance := 5 * math.Sqrt(0.25/n)
			if got := float64(failing) / n; math.Abs(got-c.failing) > tolerance {
				t.Errorf("%.3f of the calls fail; want %.3f", got, c.failing)
			}
			if got := float64(slows) / n; math.Abs(got-c.slows) > tolerance {
				t.Errorf("%.3f of the calls are slow; want %.3f", got, c.slows)
			}
		})
	}
}
