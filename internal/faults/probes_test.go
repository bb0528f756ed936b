package faults

import (
	"testing"
	"time"

	"github.com/cbgrpc/cbgrpc/coordinator"
	"github.com/cbgrpc/cbgrpc/internal/cbfleet"
	"github.com/cbgrpc/cbgrpc/internal/fleettest"
	"github.com/cbgrpc/cbgrpc/internal/redistest"
)

// TestProbeBudget is scenario 2: while the breaker is half-open, the
// dependency never has more than Probes calls in flight from the whole
// fleet. Eight replicas with two callers each want to call all the time;
// recovery needs eight probe successes, each taking 40ms, so probes overlap
// if they can.
func TestProbeBudget(t *testing.T) {
	const procs, callers = 8, 2
	p := fleetPolicy(20)
	p.OpenFor, p.MaxOpenFor = 300*time.Millisecond, 0
	p.Probes, p.ProbeSuccesses = 2, 8
	p.ProbeLease = 5 * time.Second

	rs := redistest.Start(t)
	srv := fleettest.NewServer(t)
	srv.SetFailure("", 1)
	fleet := fleettest.Start(t, bin, replicas(procs, cbfleet.Config{
		Redis: rs.Addr(), Target: srv.Addr(), Concurrency: callers, Policy: p,
	})...)
	fleet.Send("run")
	fleet.WaitAll(t, "every replica rejecting", settle, fleettest.Rejecting(cbfleet.EmptyCall, 20))

	// The dependency recovers, slowly; probes may start after OpenFor.
	srv.SetDelay(40 * time.Millisecond)
	srv.SetFailure("", 0)
	srv.Reset()
	fleet.Phase("recovering")
	fleet.WaitAll(t, "every replica calling again", settle, func(r cbfleet.Report) bool { return r.OK >= 10 })

	// The breaker cannot close before ProbeSuccesses calls have ended, so
	// every call that arrived before the first ProbeSuccesses had all
	// ended was admitted while half-open: a probe. (There may be more than
	// ProbeSuccesses of them: a slot freed by a settled probe is taken
	// again while the last ones are in flight.)
	calls := srv.Calls()
	var closedAt time.Time
	for _, c := range calls[:p.ProbeSuccesses] {
		if c.Failed || c.End.IsZero() {
			t.Fatalf("probe %+v failed or never ended", c)
		}
		if c.End.After(closedAt) {
			closedAt = c.End
		}
	}
	var halfOpen []fleettest.Call
	replicasProbing := map[int]bool{}
	for _, c := range calls {
		if c.At.Before(closedAt) {
			halfOpen = append(halfOpen, c)
			replicasProbing[c.Replica] = true
		}
	}
	most := fleettest.MaxConcurrent(halfOpen)
	reps := fleet.Quit(quitTimeout)
	t.Logf("half-open: %d probe calls from %d replicas over %v, at most %d at once (Probes %d); then %d calls",
		len(halfOpen), len(replicasProbing), closedAt.Sub(calls[0].At).Round(time.Millisecond), most, p.Probes,
		sum(reps, func(r cbfleet.Report) int64 { return r.Calls }))
	if most > p.Probes {
		t.Errorf("the dependency had %d probe calls in flight at once, want at most Probes = %d", most, p.Probes)
	}
	if most < p.Probes {
		// Not a failure of the breaker, but the test proved less than it
		// should: the probes never competed for the slots.
		t.Logf("note: probes never overlapped")
	}
	if s := snapshot(t, rs.Client(t), scope(srv.Addr(), cbfleet.EmptyCall), p); s.State != coordinator.StateClosed {
		t.Errorf("after recovery the breaker is %v, want closed", s.State)
	}
}

// TestKilledProbeHolderSlotReturns is scenario 7: a replica killed while
// its probe is in flight never settles it; the probe slot comes back when
// its lease ends, another replica probes, and the breaker closes.
func TestKilledProbeHolderSlotReturns(t *testing.T) {
	const procs = 3
	p := fleetPolicy(10)
	p.OpenFor, p.MaxOpenFor = 300*time.Millisecond, 0
	p.Probes, p.ProbeSuccesses = 1, 1
	p.ProbeLease = time.Second

	rs := redistest.Start(t)
	srv := fleettest.NewServer(t)
	srv.SetFailure("", 1)
	fleet := fleettest.Start(t, bin, replicas(procs, cbfleet.Config{
		Redis: rs.Addr(), Target: srv.Addr(), Concurrency: 1, Policy: p,
	})...)
	fleet.Send("run")
	fleet.WaitAll(t, "every replica rejecting", settle, fleettest.Rejecting(cbfleet.EmptyCall, 10))

	// The first probe reaches a dependency that holds it.
	srv.Hold()
	srv.SetFailure("", 0)
	srv.Reset()
	deadline := time.Now().Add(settle)
	for srv.Counts().InFlight == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no probe reached the dependency")
		}
		time.Sleep(5 * time.Millisecond)
	}
	probe := srv.Calls()[0]
	var holder *fleettest.Replica
	var survivors fleettest.Fleet
	for _, r := range fleet {
		if r.ID == probe.Replica {
			holder = r
		} else {
			survivors = append(survivors, r)
		}
	}
	if holder == nil {
		t.Fatalf("the probe came from replica %d, not one of ours", probe.Replica)
	}
	holder.Kill()
	srv.Release()
	survivors.Phase("after kill")
	survivors.WaitAll(t, "the survivors calling again", settle, func(r cbfleet.Report) bool { return r.OK >= 5 })

	calls := srv.Calls()
	if len(calls) < 2 {
		t.Fatalf("%d calls reached the dependency, want the held probe and more", len(calls))
	}
	next := calls[1]
	gap := next.At.Sub(probe.At)
	inFlight := fleettest.MaxConcurrent(calls[:2])
	for _, r := range survivors.Quit(quitTimeout) {
		if r.Errors > 0 {
			t.Errorf("replica %d: %d calls failed after the kill: %s", r.ID, r.Errors, r.Err)
		}
	}
	t.Logf("replica %d killed holding the only probe slot; the next call reached the dependency %v after its probe (ProbeLease %v), from replica %d; then the breaker closed",
		holder.ID, gap.Round(time.Millisecond), p.ProbeLease, next.Replica)
	// The lease was claimed a moment before the probe arrived.
	if gap < p.ProbeLease-100*time.Millisecond {
		t.Errorf("the next call came %v after the dead replica's probe, before its lease of %v could end", gap, p.ProbeLease)
	}
	if inFlight > 1 {
		t.Errorf("the next probe overlapped the dead replica's probe")
	}
	if next.Replica == holder.ID {
		t.Errorf("the next call came from the killed replica %d", holder.ID)
	}
	if s := snapshot(t, rs.Client(t), scope(srv.Addr(), cbfleet.EmptyCall), p); s.State != coordinator.StateClosed {
		t.Errorf("after recovery the breaker is %v, want closed", s.State)
	}
}
