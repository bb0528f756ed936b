package memory_test

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cbgrpc/cbgrpc/coordinator"
)

// TestHalfOpenConcurrentCallersNeverHoldMoreThanProbes has many goroutines
// claim and settle probes of one half-open scope at once. A goroutine counts
// itself from the Probe verdict until just before it settles, so the count
// never exceeds the slots it really holds; it must never exceed Probes.
func TestHalfOpenConcurrentCallersNeverHoldMoreThanProbes(t *testing.T) {
	p := coordinator.Policy{
		Window: time.Second, Buckets: 10, ConsecutiveFailures: 1, OpenFor: 100 * time.Millisecond,
		Probes: 3, ProbeLease: time.Minute, ProbeSuccesses: 1 << 30, // stays half-open
	}
	c, clk := onFakeClock()
	ctx := context.Background()
	d, err := c.Admit(ctx, coordinator.AdmitRequest{Scope: "busy", Policy: p, Claim: "first"})
	if err != nil {
		t.Fatal(err)
	}
	if r, err := c.Record(ctx, coordinator.RecordRequest{Scope: "busy", Policy: p, Outcomes: []coordinator.Outcome{{Generation: d.Generation, Failure: true}}}); err != nil || r.Transition == nil {
		t.Fatalf("Record of a failure: %+v, %v; want a trip", r, err)
	}
	clk.Advance(p.OpenFor)

	var holding, most, granted atomic.Int64
	var wg sync.WaitGroup
	for g := range 32 {
		wg.Go(func() {
			for i := range 200 {
				claim := fmt.Sprintf("g%d-%d", g, i)
				d, err := c.Admit(ctx, coordinator.AdmitRequest{Scope: "busy", Policy: p, Claim: claim})
				if err != nil {
					t.Error(err)
					return
				}
				if d.Verdict != coordinator.Probe {
					continue
				}
				granted.Add(1)
				n := holding.Add(1)
				for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
				}
				// The probe call: others run meanwhile.
				runtime.Gosched()
				if s, err := c.Snapshot(ctx, "busy", p); err != nil || s.ProbesInFlight > p.Probes {
					t.Errorf("snapshot %+v, %v: more probes in flight than %d", s, err, p.Probes)
				}
				holding.Add(-1)
				if _, err := c.Settle(ctx, coordinator.SettleRequest{Scope: "busy", Policy: p, Claim: claim, Outcome: coordinator.Outcome{Generation: d.Generation}}); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	if m := most.Load(); m > int64(p.Probes) {
		t.Errorf("%d callers held a probe slot at once; Probes is %d", m, p.Probes)
	}
	if granted.Load() <= int64(p.Probes) {
		t.Errorf("only %d probes granted: the slots were not reused and the test proves nothing", granted.Load())
	}
	t.Logf("%d probes granted, at most %d held at once", granted.Load(), most.Load())
}
