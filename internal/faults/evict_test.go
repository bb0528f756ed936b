package faults

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cbgrpc/cbgrpc/coordinator"
	"github.com/cbgrpc/cbgrpc/internal/cbfleet"
	"github.com/cbgrpc/cbgrpc/internal/fleettest"
	"github.com/cbgrpc/cbgrpc/internal/redistest"
)

// TestStateEvictedWindowSurvives is scenario 6: the state hash of a scope
// is evicted while its window, one failure short of tripping, survives.
// No old outcome is adopted: the breaker restarts in a generation the old
// window does not carry, and trips only after MinCalls new failures.
func TestStateEvictedWindowSurvives(t *testing.T) {
	const procs, minCalls = 2, 20
	rs := redistest.Start(t)
	rdb := rs.Client(t)
	srv := fleettest.NewServer(t)
	srv.SetFailure("", 1)
	p := fleetPolicy(minCalls)
	fleet := fleettest.Start(t, bin, replicas(procs, cbfleet.Config{
		Redis: rs.Addr(), Target: srv.Addr(), Concurrency: 1, Policy: p,
		NoAdmissionCache: true, // the bound counts admissions that ask Redis
		// and holds while Redis answers: an admission that times out fails
		// open by design (see TestFleetTrip).
		CoordinatorTimeout: time.Second,
	})...)
	sc := scope(srv.Addr(), cbfleet.EmptyCall)

	// One short of MinCalls, every one a failure.
	fleet.Send("calls " + strconv.Itoa((minCalls-1)/procs))
	fleet[0].Send("calls " + strconv.Itoa((minCalls-1)%procs))
	deadline := time.Now().Add(settle)
	for snapshot(t, rdb, sc, p).Calls < minCalls-1 {
		if time.Now().After(deadline) {
			t.Fatalf("the window never held %d calls: %+v", minCalls-1, snapshot(t, rdb, sc, p))
		}
		time.Sleep(10 * time.Millisecond)
	}
	before := snapshot(t, rdb, sc, p)

	// Evict the state hash alone (doc.go of coordinator/redis names the
	// keys): the window key stays.
	ctx := context.Background()
	keys, err := rdb.Keys(ctx, "cbgrpc:v2:*:state").Result()
	if err != nil || len(keys) != 1 {
		t.Fatalf("state keys %v, %v; want one", keys, err)
	}
	if err := rdb.Del(ctx, keys[0]).Err(); err != nil {
		t.Fatal(err)
	}
	if n, _ := rdb.Exists(ctx, strings.TrimSuffix(keys[0], "state")+"window").Result(); n != 1 {
		t.Fatal("the window key is gone too; the test needs it to survive")
	}

	srv.Reset()
	fleet.Send("run")
	fleet.WaitAll(t, "every replica rejecting", settle, fleettest.Rejecting(cbfleet.EmptyCall, 10))
	absorbed := srv.Counts().Failed
	fleet.Quit(quitTimeout)
	after := snapshot(t, rdb, sc, p)

	bound := minCalls + procs*(1+2)
	t.Logf("window held %d failures in generation %d; state evicted; the dependency then absorbed %d failing calls before the fleet rejected; breaker %v in generation %d",
		before.Calls, before.Generation, absorbed, after.State, after.Generation)
	if absorbed < minCalls || absorbed > bound {
		t.Errorf("after the eviction the dependency absorbed %d failing calls, want %d..%d: an old outcome was adopted, or the trip came late", absorbed, minCalls, bound)
	}
	if after.State != coordinator.StateOpen {
		t.Errorf("breaker %v, want open", after.State)
	}
	if after.Generation <= before.Generation+1 {
		t.Errorf("generation %d after the eviction and a trip; want a fresh one, unlike the evicted %d", after.Generation, before.Generation)
	}
}
