package cbgrpc

import (
	"context"
	"fmt"
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

	// Each replica's feed reports when it hands a transition to the
	// Breaker, which learns it in the same goroutine at once: no polling
	// loop competes with the feed for the CPU.
	heardc := make(chan heardAt, 64*replicas)
	var breakers []*Breaker
	for range replicas {
		c := newTestCoordinator(b, cbredis.New(srv.Client(b)))
		c.heard = func(tr coordinator.Transition) { heardc <- heardAt{tr, time.Now()} }
		br, err := New(c.likeRedis(), WithPolicy(p), WithAdmissionCache(time.Hour))
		if err != nil {
			b.Fatal(err)
		}
		defer br.Close()
		admitCall(br, ctx, &call{scope: scope, method: testMethod})
		breakers = append(breakers, br)
	}
	for _, br := range breakers {
		eventually(b, "every replica follows the scope", func() bool { return followed(br, scope) })
	}
	tripper := cbredis.New(srv.Client(b))
	// wait returns when every replica has heard of the transition to s in
	// generation gen, and the time the last one did.
	wait := func(gen uint64, s coordinator.State) time.Time {
		var last time.Time
		timeout := time.After(10 * time.Second)
		for n := 0; n < replicas; {
			select {
			case h := <-heardc:
				if h.Generation == gen && h.To == s {
					n++
					last = h.at
				}
			case <-timeout:
				b.Fatalf("the transition to %v in generation %d did not reach every replica in 10s", s, gen)
			}
		}
		return last
	}

	var lat []time.Duration
	for b.Loop() {
		snap, err := tripper.Snapshot(ctx, scope, p)
		if err != nil {
			b.Fatal(err)
		}
		start := time.Now()
		res, err := tripper.Record(ctx, coordinator.RecordRequest{Scope: scope, Policy: p, Outcomes: []coordinator.Outcome{{Generation: snap.Generation, Failure: true}}})
		if err != nil || res.Transition == nil {
			b.Fatalf("trip: %+v, %v", res, err)
		}
		lat = append(lat, wait(res.Generation, coordinator.StateOpen).Sub(start))

		// Recover: the open period (1ms) ends, a probe succeeds.
		time.Sleep(2 * time.Millisecond)
		claim := fmt.Sprint("probe-", len(lat))
		d, err := tripper.Admit(ctx, coordinator.AdmitRequest{Scope: scope, Policy: p, Claim: claim})
		if err != nil || d.Verdict != coordinator.Probe {
			b.Fatalf("probe: %+v, %v", d, err)
		}
		closed, err := tripper.Settle(ctx, coordinator.SettleRequest{Scope: scope, Policy: p, Claim: claim, Outcome: coordinator.Outcome{Generation: d.Generation}})
		if err != nil || closed.State != coordinator.StateClosed {
			b.Fatalf("settle: %+v, %v", closed, err)
		}
		// The probe moved the breaker through half-open to closed.
		wait(closed.Generation, coordinator.StateClosed)
	}
	b.StopTimer()
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(lat[(len(lat)*99)/100].Microseconds()), "p99-µs")
	b.ReportMetric(float64(lat[len(lat)-1].Microseconds()), "max-µs")
}

// heardAt is a transition and when a replica's feed delivered it.
type heardAt struct {
	coordinator.Transition
	at time.Time
}
