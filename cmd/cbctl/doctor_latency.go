package main

import (
	"context"
	"fmt"
	"slices"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// latencyPings is how many PINGs the round trip is measured over.
const latencyPings = 10

// checkLatency measures the round trip with PINGs against the services'
// coordinator timeout: an admission is one script call, which costs a
// round trip and more, so a round trip near the timeout leaves calls
// deciding by the failure policy.
func (d *doctor) checkLatency(ctx context.Context, n *goredis.Client) {
	const check = "latency"
	rtts := make([]time.Duration, 0, latencyPings)
	for range latencyPings {
		start := time.Now()
		if err := n.Ping(ctx).Err(); err != nil {
			d.add(check, d.node(n), statusFail, "PING failed: "+err.Error(), "check the network to the server")
			return
		}
		rtts = append(rtts, time.Since(start))
	}
	slices.Sort(rtts)
	p50, max := rtts[len(rtts)/2].Round(time.Microsecond), rtts[len(rtts)-1].Round(time.Microsecond)
	found := fmt.Sprintf("round trip p50 %v, max %v over %d PINGs; coordinator timeout %v", p50, max, latencyPings, d.opts.coordTimeout)
	switch {
	case p50 >= d.opts.coordTimeout/2:
		d.add(check, d.node(n), statusFail, found,
			"run the services closer to Redis, or raise their WithCoordinatorTimeout (give it as --coordinator-timeout)")
	case max >= d.opts.coordTimeout/2:
		d.add(check, d.node(n), statusWarn, found+": some admissions would time out",
			"look for what delays the server (SLOWLOG, a busy CPU) or the network, or raise WithCoordinatorTimeout")
	default:
		d.add(check, d.node(n), statusOK, found, "")
	}
}
