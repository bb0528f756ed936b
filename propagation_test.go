package cbgrpc

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/cbgrpc/cbgrpc/coordinator"
	cbredis "github.com/cbgrpc/cbgrpc/coordinator/redis"
	"github.com/cbgrpc/cbgrpc/internal/redistest"
)

// BenchmarkTripPropagation measures how long a trip made by one replica
// takes to reach the admission caches of the others over the Redis
// transition feed: each iteration trips a scope through the coordinator,
// waits until all 8 replicas' caches hold the open generation, then
// recovers the scope. It reports the p50, p99 and max over iterations of
// the time from sending the tripping Record to the last replica knowing;
// run it with -benchtime 100x for 100 trips.
func BenchmarkTripPropagation(b *testing.B) {
	const replicas = 8
	srv := redistest.Start(b)
	p := tripPolicy()
	p.OpenFor = time.Millisecond
	p.MaxOpenFor = 0
	const scope = "propagation"
	ctx := context.Background()

	var breakers []*Breaker
	for range replicas {
		br, err := New(cbredis.New(srv.Client(b)), WithPolicy(p), WithAdmissionCache(time.Hour))
		if err != nil {
			b.Fatal(err)
		}
		defer br.Close()
		br.admit(ctx, scope)
		breakers = append(breakers, br)
	}
	for _, br := range breakers {
		eventually(b, "every replica follows the scope", func() bool { return followed(br, scope) })
	}
	tripper := cbredis.New(srv.Client(b))
	knows := func(gen uint64, s coordinator.State) bool {
		for _, br := range breakers {
			br.cache.mu.RLock()
			e, ok := br.cache.entries[scope]
			br.cache.mu.RUnlock()
			if !ok || e.gen < gen || (e.gen == gen && e.state != s) {
				return false
			}
		}
		return true
	}

	var lat []time.Duration
	for b.Loop() {
		snap, err := tripper.Snapshot(ctx, scope, p)
		if err != nil {
			b.Fatal(err)
		}
		start := time.Now()
		res, err := tripper.Record(ctx, scope, p, []coordinator.Outcome{{Generation: snap.Generation, Failure: true}})
		if err != nil || res.Transition == nil {
			b.Fatalf("trip: %+v, %v", res, err)
		}
		for !knows(res.Generation, coordinator.StateOpen) {
			if time.Since(start) > 10*time.Second {
				b.Fatalf("the trip to generation %d did not reach every replica in 10s", res.Generation)
			}
			runtime.Gosched()
		}
		lat = append(lat, time.Since(start))

		// Recover: the open period (1ms) ends, a probe succeeds.
		time.Sleep(2 * time.Millisecond)
		claim := fmt.Sprint("probe-", len(lat))
		d, err := tripper.Admit(ctx, scope, p, claim)
		if err != nil || d.Verdict != coordinator.Probe {
			b.Fatalf("probe: %+v, %v", d, err)
		}
		closed, err := tripper.Settle(ctx, scope, p, claim, coordinator.Outcome{Generation: d.Generation})
		if err != nil || closed.State != coordinator.StateClosed {
			b.Fatalf("settle: %+v, %v", closed, err)
		}
		eventually(b, "every replica hears the recovery", func() bool { return knows(closed.Generation, coordinator.StateClosed) })
	}
	b.StopTimer()
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(lat[(len(lat)*99)/100].Microseconds()), "p99-µs")
	b.ReportMetric(float64(lat[len(lat)-1].Microseconds()), "max-µs")
}
