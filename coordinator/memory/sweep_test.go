package memory_test

import (
	"context"
	"fmt"
	"reflect"
	"runtime"
	"testing"
	"time"

	"github.com/cbgrpc/cbgrpc/coordinator"
	"github.com/cbgrpc/cbgrpc/coordinator/implement"
)

// A scope that minted more than a thousand generations in its last
// millisecond has borrowed from the next ones. Forgotten a millisecond
// later (a window of 1ms), it must still be born again above them, even
// after the coordinator swept its forgotten scopes.
func TestForgottenScopeIsBornAboveBorrowedGenerations(t *testing.T) {
	c, clk := onFakeClock()
	ctx := context.Background()
	p := coordinator.DefaultPolicy()
	p.Window, p.Buckets = time.Millisecond, 1
	note := coordinator.Note{Reason: "flapping"}
	var last coordinator.Result
	var err error
	for range 600 {
		if _, err = c.Isolate(ctx, coordinator.CommandRequest{Scope: "flapping", Policy: p, Note: note}); err == nil {
			last, err = c.Release(ctx, coordinator.CommandRequest{Scope: "flapping", Policy: p, Note: note})
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if floor := implement.NextGeneration(0, clk.Now().Add(time.Millisecond)); last.Generation < floor {
		t.Fatalf("1200 generations minted in one millisecond end at %d; want them to borrow past %d", last.Generation, floor)
	}
	clk.Advance(time.Millisecond)
	// Operations on other scopes give the coordinator the occasion to sweep.
	for _, scope := range []string{"a", "b", "c"} {
		if _, err := c.Admit(ctx, coordinator.AdmitRequest{Scope: scope, Policy: p, Claim: ""}); err != nil {
			t.Fatal(err)
		}
	}
	if s, _ := c.Snapshot(ctx, "flapping", p); !reflect.DeepEqual(s, coordinator.Snapshot{Scope: "flapping"}) {
		t.Fatalf("snapshot a window after the last release: %+v; want a forgotten scope", s)
	}
	d, err := c.Admit(ctx, coordinator.AdmitRequest{Scope: "flapping", Policy: p, Claim: ""})
	if err != nil {
		t.Fatal(err)
	}
	if d.Generation <= last.Generation {
		t.Errorf("born again in generation %d; want above %d, the last one it had", d.Generation, last.Generation)
	}
}

// Memory follows the scopes in use, however few calls there are: scopes
// idle for a few windows are forgotten while one scope keeps a trickle of
// calls, one a bucket, far fewer operations than there are idle scopes.
func TestIdleScopesAreForgottenAtATrickle(t *testing.T) {
	c, clk := onFakeClock()
	ctx := context.Background()
	p := coordinator.DefaultPolicy()
	const idle = 1000
	for i := range idle {
		if _, err := c.Admit(ctx, coordinator.AdmitRequest{Scope: fmt.Sprint("idle/", i), Policy: p, Claim: ""}); err != nil {
			t.Fatal(err)
		}
	}
	for range 3 * p.Buckets {
		clk.Advance(p.BucketWidth())
		if _, err := c.Admit(ctx, coordinator.AdmitRequest{Scope: "trickle", Policy: p, Claim: ""}); err != nil {
			t.Fatal(err)
		}
	}
	if held := c.Held(); held != 1 {
		t.Errorf("after %d scopes idle for three windows, %d calls of another: %d scopes held; want 1, the one in use",
			idle, 3*p.Buckets, held)
	}
}

// BenchmarkIdleScopesMemory measures what the coordinator holds, in heap
// bytes after a GC, once 100,000 scopes that had a failed call each (an
// Admit and a Record from one replica) went idle
// for six windows while one scope kept a call a bucket: held-MB, beside
// peak-MB with all of them in use. Run with -benchtime=1x.
func BenchmarkIdleScopesMemory(b *testing.B) {
	ctx := context.Background()
	p := coordinator.DefaultPolicy()
	heap := func() float64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return float64(m.HeapAlloc) / (1 << 20)
	}
	var peak, held float64
	for b.Loop() {
		base := heap()
		c, clk := onFakeClock()
		for i := range 100_000 {
			scope := fmt.Sprint("idle/", i)
			d, err := c.Admit(ctx, coordinator.AdmitRequest{Scope: scope, Policy: p, Claim: ""})
			if err == nil {
				_, err = c.Record(ctx, coordinator.RecordRequest{Scope: scope, Policy: p, Replica: "replica-1", BatchID: scope,
					Outcomes: []coordinator.Outcome{{Generation: d.Generation, Failure: true, Duration: time.Millisecond}}})
			}
			if err != nil {
				b.Fatal(err)
			}
		}
		peak = heap() - base
		for range 6 * p.Buckets {
			clk.Advance(p.BucketWidth())
			if _, err := c.Admit(ctx, coordinator.AdmitRequest{Scope: "trickle", Policy: p, Claim: ""}); err != nil {
				b.Fatal(err)
			}
		}
		held = heap() - base
		b.ReportMetric(float64(c.Held()), "scopes-held")
		runtime.KeepAlive(c)
	}
	b.ReportMetric(peak, "peak-MB")
	b.ReportMetric(held, "held-MB")
}
