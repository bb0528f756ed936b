package faults

import (
	"testing"
	"time"

	"github.com/cbgrpc/cbgrpc/internal/cbfleet"
	"github.com/cbgrpc/cbgrpc/internal/fleettest"
	"github.com/cbgrpc/cbgrpc/internal/redistest"
)

// TestFleetTrip is scenario 1: eight replicas call a dependency that
// fails every call. Sharing one breaker in Redis, the dependency absorbs
// at most MinCalls + replicas x (callers + 2) failing calls before every
// replica rejects: MinCalls to trip, and per replica the calls in flight
// plus the outcomes on their way to Redis. With a breaker per replica the
// same run absorbs about replicas x MinCalls: each replica must see
// MinCalls failures of its own.
//
// The bound is for replicas that ask Redis on every admission
// (WithAdmissionCache(0)). With the admission cache (the default), calls
// admitted between the trip and its news reaching a replica's cache go
// through too: that run is logged and held only to beating per-replica
// breakers by far.
//
// The bound holds with two callers per replica. With more, the outcomes
// on their way grow with the callers too: while one Record of a replica is
// in flight, each caller may finish another call whose outcome waits for
// the next (group commit). Four callers are run and logged for the record,
// held only to beating per-replica breakers by far.
func TestFleetTrip(t *testing.T) {
	const (
		procs    = 8
		minCalls = 40
	)
	run := func(t *testing.T, cfg cbfleet.Config) int {
		srv := fleettest.NewServer(t)
		srv.SetFailure("", 1)
		cfg.Target = srv.Addr()
		cfg.Policy = fleetPolicy(minCalls)
		// The bounds hold while Redis answers: a replica whose admission
		// times out fails open for the back-off, by design, and drops its
		// outcomes meanwhile. At the default 50 ms, with -race and other
		// packages' tests on 2 cores, CI saw 25 time out in one run and
		// 2,505 failing calls absorbed, which says nothing of the shared
		// window. The slow-Redis scenarios test the timeout.
		cfg.CoordinatorTimeout = time.Second
		fleet := fleettest.Start(t, bin, replicas(procs, cfg)...)
		fleet.Send("run")
		fleet.WaitAll(t, "every replica rejecting", settle, fleettest.Rejecting(cbfleet.EmptyCall, 20))
		absorbed := srv.Counts().Failed
		// Nothing reaches the dependency once every replica rejects.
		fleet.Phase("open")
		fleet.WaitAll(t, "more rejections", settle, func(r cbfleet.Report) bool { return r.Rejected >= 100 })
		after := srv.Counts().Failed - absorbed
		var calls, rejected, errs int64
		for _, r := range fleet.Quit(quitTimeout) {
			calls += r.Calls
			rejected += r.Rejected
			errs += r.CoordErrs
		}
		if after != 0 {
			t.Errorf("%d failing calls reached the dependency after every replica rejected", after)
		}
		t.Logf("%d replicas x %d callers: the dependency absorbed %d failing calls; then %d calls, %d rejected; %d coordinator errors",
			procs, cfg.Concurrency, absorbed, calls, rejected, errs)
		return absorbed
	}

	const callers = 2
	bound := minCalls + procs*(callers+2)
	var shared, cached, own, four int
	t.Run("Shared", func(t *testing.T) {
		shared = run(t, cbfleet.Config{Redis: redistest.Start(t).Addr(), Concurrency: callers, NoAdmissionCache: true})
		if shared < minCalls || shared > bound {
			t.Errorf("the dependency absorbed %d failing calls, want %d..%d (MinCalls + replicas x (callers + 2))", shared, minCalls, bound)
		}
	})
	t.Run("SharedCached", func(t *testing.T) {
		cached = run(t, cbfleet.Config{Redis: redistest.Start(t).Addr(), Concurrency: callers})
		if cached < minCalls || cached >= procs*minCalls/2 {
			t.Errorf("with the admission cache the dependency absorbed %d failing calls, want %d..%d (half of per-replica breakers)", cached, minCalls, procs*minCalls/2-1)
		}
	})
	t.Run("PerReplica", func(t *testing.T) {
		// Each replica on a coordinator of its own: the breakers the
		// fleet-wide one replaces.
		own = run(t, cbfleet.Config{Concurrency: callers})
		if own < procs*minCalls {
			t.Errorf("per-replica breakers absorbed %d failing calls, want at least replicas x MinCalls = %d", own, procs*minCalls)
		}
	})
	t.Run("SharedFourCallers", func(t *testing.T) {
		four = run(t, cbfleet.Config{Redis: redistest.Start(t).Addr(), Concurrency: 4, NoAdmissionCache: true})
		if four < minCalls || four >= procs*minCalls/2 {
			t.Errorf("with 4 callers the dependency absorbed %d failing calls, want %d..%d (half of per-replica breakers)", four, minCalls, procs*minCalls/2-1)
		}
	})
	t.Logf("failing calls absorbed: shared breaker %d (bound %d), with the admission cache %d, per-replica breakers %d (replicas x MinCalls = %d); shared with 4 callers %d (bound %d)",
		shared, bound, cached, own, procs*minCalls, four, minCalls+procs*(4+2))
}
