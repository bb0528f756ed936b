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
// per-replica throttling, each against a Redis of its own, and writes a
// plot of each into dir.
func throttlePlots(ctx context.Context, dir string) error {
	p := coordinator.DefaultPolicy()
	// A window of 10 s, so that the 20 s overload is two windows; a
	// failure ratio above the 50% that K 2 holds the dependency at.
	p.Window, p.Buckets, p.FailureRatio, p.Throttle = 10*time.Second, 10, 0.8, 2
	cfg := bench.ThrottleConfig{Replicas: 16, Rate: 10, Duration: 45 * time.Second,
		OverloadAt: 10 * time.Second, RecoverAt: 30 * time.Second, Capacity: 0.4, Policy: p}
	for _, v := range []struct {
		perReplica bool
		file       string
		title      string
	}{
		{false, "throttle-fleet.svg", "Fleet-wide adaptive throttling (cbgrpc, Policy.Throttle 2): 16 replicas × 10 calls/s"},
		{true, "throttle-replica.svg", "Per-replica adaptive throttling (K 2, each replica's own counts): 16 replicas × 10 calls/s"},
	} {
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
		path := filepath.Join(dir, v.file)
		if err := bench.WriteFile(path, func(w io.Writer) error { return bench.WriteThrottleSVG(w, run, v.title) }); err != nil {
			return err
		}
		for _, span := range []struct {
			what     string
			from, to time.Duration
		}{
			{"healthy", 2 * time.Second, cfg.OverloadAt},
			{"overload, first window", cfg.OverloadAt, cfg.OverloadAt + p.Window},
			{"overload, second window", cfg.OverloadAt + p.Window, cfg.RecoverAt},
			{"recovered, first 5 s", cfg.RecoverAt, cfg.RecoverAt + 5*time.Second},
			{"recovered, after 5 s", cfg.RecoverAt + 5*time.Second, cfg.Duration},
		} {
			o, a, acc := bench.ThrottleSummary(run, span.from, span.to)
			log.Printf("%s, %s: offered %.1f, admitted %.1f, accepted %.1f per second (admitted %.2f × accepted)",
				v.file, span.what, o, a, acc, a/acc)
		}
		fmt.Printf("wrote %s\n", path)
	}
	return nil
}
