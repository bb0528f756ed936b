package main

import (
	"context"
	"fmt"
	"io"
	"log"
	"path/filepath"
	"time"

	"github.com/cbgrpc/cbgrpc/bench"
	"github.com/cbgrpc/cbgrpc/coordinator"
)

// throttlePlots runs the same overload with fleet-wide and with
// per-replica throttling, and a deep overload fleet-wide, each against a
// Redis of its own, and writes a plot of each into dir. Each replica's
// calls come at random with poisson, and runOf is the policy's
// ConsecutiveFailures unless negative.
func throttlePlots(ctx context.Context, dir string, poisson bool, runOf int) error {
	p := coordinator.DefaultPolicy()
	// A window of 10 s, so that the 20 s overload is two windows; a
	// failure ratio above the 50% that K 2 holds the dependency at.
	p.Window, p.Buckets, p.FailureRatio, p.Throttle = 10*time.Second, 10, 0.8, 2
	if runOf >= 0 {
		p.ConsecutiveFailures = runOf
	}
	log.Printf("policy %+v; calls at random: %v", p, poisson)
	mild := bench.ThrottleConfig{Replicas: 16, Rate: 10, Duration: 45 * time.Second,
		OverloadAt: 10 * time.Second, RecoverAt: 30 * time.Second, Capacity: 0.4, Policy: p, Poisson: poisson}
	// The deep overload serves 5%: the throttle rejects about 90% of the
	// calls at its end, and the share falls by about 1 − K × (1 − p) a
	// window after the recovery, so the run goes on for five windows.
	deep := mild
	deep.Capacity, deep.Duration = 0.05, 80*time.Second
	// The throttle alone: no run rule, and a ratio rule only a dependency
	// that fails nearly every call trips, so that what the throttle does
	// after the recovery shows rather than the breaker's back-off.
	alone := deep
	alone.Policy.ConsecutiveFailures, alone.Policy.FailureRatio = 0, 0.99
	for _, v := range []struct {
		cfg        bench.ThrottleConfig
		perReplica bool
		file       string
		title      string
	}{
		{mild, false, "throttle-fleet.svg", "Fleet-wide throttle (cbgrpc, K 2)"},
		{mild, true, "throttle-replica.svg", "Per-replica throttle (K 2, each replica's own counts)"},
		{deep, false, "", "Deep overload, fleet-wide throttle (K 2)"}, // figures only
		{alone, false, "throttle-deep.svg", "Deep overload, the throttle alone (K 2, FailureRatio 0.99)"},
	} {
		cfg := v.cfg
		arrivals := "calls at a fixed phase"
		if cfg.Poisson {
			arrivals = "calls at random"
		}
		title := fmt.Sprintf("%s: 16 × 10 calls/s, %s, ConsecutiveFailures %d", v.title, arrivals, cfg.Policy.ConsecutiveFailures)
		cfg.PerReplica = v.perReplica
		r, err := bench.StartRedis()
		if err != nil {
			return err
		}
		run, err := bench.RunThrottle(ctx, r.Target(), cfg)
		r.Stop()
		if err != nil {
			return err
		}
		name := v.file
		if name == "" {
			name = "deep overload, the trip rules on"
		}
		for _, span := range []struct {
			what     string
			from, to time.Duration
		}{
			{"healthy", 2 * time.Second, cfg.OverloadAt},
			{"overload, first window", cfg.OverloadAt, cfg.OverloadAt + p.Window},
			{"overload, second window", cfg.OverloadAt + p.Window, cfg.RecoverAt},
			{"recovered, first 5 s", cfg.RecoverAt, cfg.RecoverAt + 5*time.Second},
			{"recovered, after 5 s", cfg.RecoverAt + 5*time.Second, cfg.RecoverAt + 15*time.Second},
			{"recovered, 15 s on", cfg.RecoverAt + 15*time.Second, cfg.Duration},
		} {
			o, a, acc, tr := bench.ThrottleSummary(run, span.from, span.to)
			log.Printf("%s, %s: offered %.1f, admitted %.1f, accepted %.1f, rejected by a tripped breaker %.1f per second (admitted %.2f × accepted)",
				name, span.what, o, a, acc, tr, a/acc)
		}
		for _, share := range []float64{0.5, 0.9, 0.99} {
			if d, ok := bench.RecoveredAfter(run, share); ok {
				log.Printf("%s: admitted ≥ %.0f%% of the offered calls in every second from %v after the recovery", name, 100*share, d)
			} else {
				log.Printf("%s: never again admitted ≥ %.0f%% of the offered calls in every second", name, 100*share)
			}
		}
		if v.file != "" {
			path := filepath.Join(dir, v.file)
			if err := bench.WriteFile(path, func(w io.Writer) error { return bench.WriteThrottleSVG(w, run, title) }); err != nil {
				return err
			}
			fmt.Printf("wrote %s\n", path)
		}
	}
	return nil
}
