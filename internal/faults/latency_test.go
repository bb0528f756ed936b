package faults

import (
	"testing"
	"time"

	"github.com/cbgrpc/cbgrpc"
	"github.com/cbgrpc/cbgrpc/internal/cbfleet"
	"github.com/cbgrpc/cbgrpc/internal/faultproxy"
	"github.com/cbgrpc/cbgrpc/internal/fleettest"
	"github.com/cbgrpc/cbgrpc/internal/redistest"
)

// TestRedisLatency is scenario 8: a proxy in front of Redis adds 50ms to
// every read and write, so a round trip takes 100ms or more. Calls are
// never slowed by more than the coordinator timeout: with the default
// timeout (50ms, below the round trip) the coordinator calls time out and
// the calls go on by the failure policy; with a timeout above the round
// trip they wait for it. Outcomes that cannot be delivered in time are
// dropped, and counted: every outcome is either in Redis's window or in
// the drop counter, none lost silently.
func TestRedisLatency(t *testing.T) {
	const procs, latency = 3, 50 * time.Millisecond
	for _, tc := range []struct {
		name    string
		timeout time.Duration
	}{
		{"TimeoutBelowRoundTrip", cbgrpc.DefaultCoordinatorTimeout},
		{"TimeoutAboveRoundTrip", 300 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rs := redistest.Start(t)
			proxy, err := faultproxy.Start(rs.Addr())
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { proxy.Close() })
			srv := fleettest.NewServer(t)
			p := fleetPolicy(20)
			p.Window = 5 * time.Minute // every outcome of the test stays in it
			fleet := fleettest.Start(t, bin, replicas(procs, cbfleet.Config{
				Redis: proxy.Addr(), Target: srv.Addr(), Concurrency: 2, Policy: p,
				CoordinatorTimeout: tc.timeout,
			})...)
			fleet.Send("run")
			fleet.WaitAll(t, "calls before the latency", settle, func(r cbfleet.Report) bool { return r.Calls >= 100 })

			proxy.SetLatency(latency)
			before := fleet.Phase("slow")
			fleet.WaitAll(t, "calls with the latency", settle, func(r cbfleet.Report) bool { return r.MS >= 1500 && r.Calls >= 10 })
			slow := fleet.Phase("fast")
			proxy.SetLatency(0)
			fleet.WaitAll(t, "calls after the latency", settle, func(r cbfleet.Report) bool { return r.Calls >= 100 })
			// Close flushes what is pending, with Redis fast again.
			end := fleet.Quit(quitTimeout)
			window := snapshot(t, rs.Client(t), scope(srv.Addr(), cbfleet.EmptyCall), p).Calls

			bound := tc.timeout + slack
			for _, r := range slow {
				t.Logf("replica %d, Redis +%v each way, timeout %v: %d calls in %dms, %d failed; latency p50 %dus p99 %dus max %dus; outcomes dropped so far %d %v",
					r.ID, latency, tc.timeout, r.Calls, r.MS, r.Errors, r.P50US, r.P99US, r.MaxUS, r.Dropped, r.DroppedBy)
				if r.Errors > 0 || r.Rejected > 0 {
					t.Errorf("replica %d: %d calls failed and %d were rejected with a slow Redis, want none: %s", r.ID, r.Errors, r.Rejected, r.Err)
				}
				if max := time.Duration(r.MaxUS) * time.Microsecond; max > bound {
					t.Errorf("replica %d: slowest call took %v with Redis slow, want at most the coordinator timeout + %v = %v", r.ID, max, slack, bound)
				}
			}
			ok := func(r cbfleet.Report) int64 { return r.OK }
			outcomes := sum(before, ok) + sum(slow, ok) + sum(end, ok)
			dropped := sum(end, func(r cbfleet.Report) int64 { return r.Dropped })
			policy := sum(end, func(r cbfleet.Report) int64 { return r.Decisions["allow/failure_policy"] })
			t.Logf("%d calls: %d outcomes in Redis's window, %d counted dropped (of which the outcomes of %d calls let through by the failure policy, which have no generation to record under)",
				outcomes, window, dropped, policy)
			// Every outcome is in the window or counted dropped, including
			// those of calls the failure policy let through. A Record that
			// timed out may have landed all the same: then its outcomes are
			// both in the window and counted dropped.
			if int64(window)+dropped < outcomes {
				t.Errorf("%d outcomes, but only %d in Redis and %d counted dropped: some were lost without being counted", outcomes, window, dropped)
			}
		})
	}
}
