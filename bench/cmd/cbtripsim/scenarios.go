package main

import (
	"fmt"
	"math"
	"time"

	"github.com/cbgrpc/cbgrpc/bench"
	"github.com/cbgrpc/cbgrpc/coordinator"
)

// scenario is one named run.
type scenario struct {
	group, name string
	cfg         bench.TripConfig
}

func scenarios() []scenario {
	def := coordinator.DefaultPolicy()
	window := def.Window
	with := func(edit func(*coordinator.Policy)) coordinator.Policy {
		p := def
		edit(&p)
		return p
	}
	ratioOnly := with(func(p *coordinator.Policy) { p.ConsecutiveFailures = 0 })
	run10 := with(func(p *coordinator.Policy) { p.ConsecutiveFailures = 10 })
	two := with(func(p *coordinator.Policy) { p.Outliers = 2 })
	slow := with(func(p *coordinator.Policy) { p.SlowCallDuration, p.SlowCallRatio = 100*time.Millisecond, 0.5 })
	var out []scenario
	out = append(out,
		scenario{"onset", "8 replicas x 50/s, 5% noise for a window, then down", bench.TripConfig{Replicas: 8, Rate: 50, Noise: 0.05, Spell: window, Down: 5 * time.Second, Stagger: 20 * time.Millisecond}},
		scenario{"noise", "8 replicas x 50/s, 5% noise for two windows", bench.TripConfig{Replicas: 8, Rate: 50, Noise: 0.05, Spell: 2 * window}},
	)
	for _, rate := range []float64{50, 500, 0} {
		what := fmt.Sprintf("%.0f/s", rate)
		if rate == 0 {
			what = "a tight loop"
		}
		for _, p := range []struct {
			name string
			p    coordinator.Policy
		}{{"default policy", def}, {"ConsecutiveFailures 10", run10}, {"ConsecutiveFailures 0", ratioOnly}} {
			out = append(out, scenario{"alone", fmt.Sprintf("1 of 8 failing alone at %s, %s", what, p.name),
				bench.TripConfig{Replicas: 8, Rate: 50, Spell: 10 * time.Second, Bad: 1, BadRate: rate, Policy: p.p}})
		}
	}
	out = append(out,
		scenario{"alone", "2 of 8 failing alone in a tight loop, Outliers 2", bench.TripConfig{Replicas: 8, Rate: 50, Spell: 10 * time.Second, Bad: 2, Policy: two}},
		scenario{"small", "1 replica x 50/s, down", bench.TripConfig{Replicas: 1, Rate: 50, Noise: 0.05, Spell: 5 * time.Second, Down: 5 * time.Second}},
		scenario{"small", "2 replicas x 50/s, down", bench.TripConfig{Replicas: 2, Rate: 50, Noise: 0.05, Spell: 5 * time.Second, Down: 5 * time.Second, Stagger: 20 * time.Millisecond}},
	)
	// A brownout after a window of noise, so that the window the rules
	// judge starts full of successes.
	brownout := func(share float64, down time.Duration) bench.TripConfig {
		return bench.TripConfig{Replicas: 8, Rate: 50, Noise: 0.05, Spell: window, Down: down, Share: share, Stagger: 20 * time.Millisecond}
	}
	// 30 % and 45 % should not trip, so they last a whole window.
	for _, share := range []float64{0.30, 0.45, 0.60, 0.80, 1} {
		down := 10 * time.Second
		if share < 0.5 {
			down = window
		}
		out = append(out, scenario{"brownout", fmt.Sprintf("8 x 50/s, 5%% noise for a window, then %.0f%% failing for %v", 100*share, down), brownout(share, down)})
	}
	ramp := brownout(1, 10*time.Second)
	ramp.RampUp = 5 * time.Second
	latency := brownout(0, window)
	latency.SlowShare, latency.SlowBy, latency.Policy = 0.6, 150*time.Millisecond, slow
	out = append(out,
		scenario{"brownout", "8 x 50/s, 5% noise for a window, then 0-100% failing over 5s, for 10s", ramp},
		scenario{"brownout", fmt.Sprintf("8 x 50/s, 5%% noise for a window, then 60%% taking 150ms for %v, SlowCallDuration 100ms, SlowCallRatio 0.5", window), latency},
	)
	zone := func(replicas, down int) bench.TripConfig {
		return bench.TripConfig{Replicas: replicas, Rate: 50, Noise: 0.05, Spell: window, Down: window, DownReplicas: down, Stagger: 20 * time.Millisecond}
	}
	out = append(out,
		scenario{"zone", "2 of 3 replicas x 50/s down after a window, for a window", zone(3, 2)},
		scenario{"zone", "3 of 8 replicas x 50/s down after a window, for a window", zone(8, 3)},
	)
	for _, rate := range []float64{0, 50} {
		what := "in a tight loop"
		if rate > 0 {
			what = fmt.Sprintf("at %.0f/s", rate)
		}
		out = append(out, scenario{"restart", fmt.Sprintf("1 of 8 failing alone %s, a new replica ID every 2s, 5%% noise, for 20s", what),
			bench.TripConfig{Replicas: 8, Rate: 50, Noise: 0.05, Spell: 20 * time.Second, Bad: 1, BadRate: rate, BadRestart: 2 * time.Second}})
	}
	out = append(out, scenario{"lowrate", "8 x 1/s, 5% noise for a window, then 60% failing for 30s",
		bench.TripConfig{Replicas: 8, Rate: 1, Noise: 0.05, Spell: window, Down: 30 * time.Second, Share: 0.6, Stagger: time.Second}})
	// Recovery after a window of noise, as the onset's; each replica's
	// calls spread over one period of its rate. 64 replicas call at 10/s,
	// not 50/s: at 50/s three breakers of 64 replicas saturate a two-core
	// machine, and cbgrpc's calls to Redis time out.
	recovery := func(replicas int, rate float64, down, recover, relapse time.Duration) bench.TripConfig {
		return bench.TripConfig{Replicas: replicas, Rate: rate, Noise: 0.05, Spell: window, Down: down, Recover: recover, Relapse: relapse,
			Stagger: time.Duration(float64(time.Second) / rate)}
	}
	out = append(out,
		scenario{"recovery", "8 x 50/s, 5% noise for a window, down for 20s, then recovered for 10s", recovery(8, 50, 20*time.Second, 10*time.Second, 0)},
		scenario{"recovery", "8 x 50/s, 5% noise for a window, down for 60s, then recovered for 10s", recovery(8, 50, time.Minute, 10*time.Second, 0)},
		scenario{"recovery", "64 x 10/s, 5% noise for a window, down for 20s, then recovered for 10s", recovery(64, 10, 20*time.Second, 10*time.Second, 0)},
		scenario{"recovery", "8 x 50/s, 5% noise for a window, down for 20s, recovered for 1s, then down again for 10s", recovery(8, 50, 20*time.Second, time.Second, 10*time.Second)},
	)
	// The same recoveries with the recovery ramp on, to weigh it against
	// the default, which has none.
	ramped := with(func(p *coordinator.Policy) { p.RampFor = 5 * time.Second })
	for _, r := range []struct {
		name             string
		recover, relapse time.Duration
	}{{"then recovered for 10s", 10 * time.Second, 0}, {"recovered for 1s, then down again for 10s", time.Second, 10 * time.Second}} {
		cfg := recovery(8, 50, 20*time.Second, r.recover, r.relapse)
		cfg.Policy = ramped
		out = append(out, scenario{"ramp", "8 x 50/s, 5% noise for a window, down for 20s, " + r.name + ", RampFor 5s", cfg})
	}
	out = append(out, stalls(window)...)
	// The peers count no slow calls.
	for i := range out {
		out[i].cfg.Peers = out[i].cfg.SlowShare == 0
	}
	return out
}

// stalls are the runs of a dependency that stops answering, and of a
// healthy one that answers slowly, which its stalls must not be taken
// for. Calls have 10 s deadlines, as callers of a dependency that may
// stall set them.
func stalls(window time.Duration) []scenario {
	const deadline = 10 * time.Second
	stall := bench.TripConfig{Replicas: 8, Rate: 50, Spell: window, Down: 12 * time.Second, Stall: true, Deadline: deadline, Stagger: 20 * time.Millisecond}
	streams := stall
	streams.Stream = true
	// A p99 of 20 times the median: 2.326 is the normal's 99th percentile.
	longTail := bench.TripConfig{Replicas: 8, Rate: 50, Spell: 2 * window, Latency: 5 * time.Millisecond, LatencySigma: math.Log(20) / 2.326, Deadline: deadline}
	slow := bench.TripConfig{Replicas: 8, Rate: 50, Spell: 2 * window, Latency: 2 * time.Second, Deadline: deadline}
	alone := bench.TripConfig{Replicas: 8, Rate: 50, Spell: 20 * time.Second, Bad: 1, BadRate: 50, Stall: true, Deadline: deadline}
	// One replica's own path hangs after a healthy spell: a zone of one.
	aloneLater := stall
	aloneLater.DownReplicas, aloneLater.Down = 1, 20*time.Second
	return []scenario{
		{"stall", "8 x 50/s healthy for a window, then stalled for 12s, 10s deadlines", stall},
		{"stall", "8 x 50/s server streams healthy for a window, then stalled before the first message for 12s, 10s deadlines", streams},
		{"stall", "8 x 50/s healthy for two windows, latency log-normal: median 5ms, p99 100ms", longTail},
		{"stall", "8 x 50/s healthy for two windows, every call taking 2s", slow},
		{"stall", "1 of 8 whose own calls hang after a healthy window, 10s deadlines, for 20s", aloneLater},
		{"stall", "1 of 8 whose own calls hang from its start at 50/s, 10s deadlines, for 20s", alone},
	}
}
