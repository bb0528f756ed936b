package cbgrpc

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/cbgrpc/cbgrpc/coordinator"
	"github.com/cbgrpc/cbgrpc/coordinator/coordinatortest"
	"github.com/cbgrpc/cbgrpc/coordinator/memory"
	cbredis "github.com/cbgrpc/cbgrpc/coordinator/redis"
	"github.com/cbgrpc/cbgrpc/internal/redistest"
)

// coordinatorKind makes one kind of coordinator on a fake clock.
type coordinatorKind struct {
	name string
	make func(t *testing.T, clk *coordinatortest.Clock) coordinator.Coordinator
}

// everyCoordinator is the in-process coordinator, a redis-server and a
// three-node Redis Cluster, each on the test's clock.
var everyCoordinator = []coordinatorKind{
	{"memory", func(t *testing.T, clk *coordinatortest.Clock) coordinator.Coordinator {
		return memory.New(memory.WithClock(clk.Now))
	}},
	{"redis", func(t *testing.T, clk *coordinatortest.Clock) coordinator.Coordinator {
		return cbredis.New(redistest.Start(t).Client(t), cbredis.WithClock(clk.Now))
	}},
	{"cluster", func(t *testing.T, clk *coordinatortest.Clock) coordinator.Coordinator {
		return cbredis.New(redistest.StartCluster(t).Client(t), cbredis.WithClock(clk.Now))
	}},
}

// tripAndRecover moves scope through a trip and a recovery, as other
// replicas would, and returns the closed generation.
func tripAndRecover(t *testing.T, c coordinator.Coordinator, clk *coordinatortest.Clock, scope string, p coordinator.Policy) uint64 {
	t.Helper()
	ctx := context.Background()
	tripScope(t, c, scope, p)
	clk.Advance(p.OpenFor)
	d, err := c.Admit(ctx, coordinator.AdmitRequest{Scope: scope, Policy: p, Claim: "prober"})
	if err != nil || d.Verdict != coordinator.Probe {
		t.Fatalf("probe: %+v, %v", d, err)
	}
	res, err := c.Settle(ctx, coordinator.SettleRequest{Scope: scope, Policy: p, Claim: "prober", Outcome: coordinator.Outcome{Generation: d.Generation}})
	if err != nil || res.State != closed {
		t.Fatalf("recovery: %+v, %v", res, err)
	}
	return res.Generation
}

// A call admitted in one generation (a long stream, say) outlives a trip,
// a recovery and a window with no traffic, in which the scope is
// forgotten: its failure must not count when it ends, although the scope
// is born again meanwhile.
func TestOutcomeOfAForgottenGenerationNeverCounts(t *testing.T) {
	for _, kind := range everyCoordinator {
		t.Run(kind.name, func(t *testing.T) {
			clk := coordinatortest.NewClock()
			c := kind.make(t, clk)
			p := tripPolicy()
			b := newBreaker(t, c, WithPolicy(p), WithAdmissionCache(0))
			ctx := context.Background()
			const scope = "fencing/forgotten"
			long, err := admitCall(b, ctx, &call{scope: scope, method: testMethod})
			if err != nil || long.fate != recorded {
				t.Fatalf("admission: %+v, %v", long, err)
			}
			recovered := tripAndRecover(t, c, clk, scope, p)
			clk.Advance(p.Window + p.BucketWidth())
			if s, _ := c.Snapshot(ctx, scope, p); s.Generation != 0 {
				t.Fatalf("after an idle window: %+v; want the scope forgotten", s)
			}

			b.finish(ctx, long, errTransport)
			var s coordinator.Snapshot
			eventually(t, "the late outcome's Record to land", func() bool {
				s, _ = c.Snapshot(ctx, scope, p)
				return s.Generation != 0
			})
			if s.State != closed || s.Calls != 0 || s.Generation <= recovered || s.Generation <= long.gen {
				t.Errorf("after the late failure of generation %d: %+v; want closed, nothing counted, above generation %d",
					long.gen, s, recovered)
			}
		})
	}
}

// After a trip, a recovery and an idle window in which the coordinator
// forgot it, a quiet healthy scope is answered locally again after one
// question: the generation it is born in is newer than what the cache
// knows, so the answer is kept.
func TestQuietScopeIsAnsweredLocallyAfterAnIdleWindow(t *testing.T) {
	for _, kind := range everyCoordinator[:2] {
		t.Run(kind.name, func(t *testing.T) {
			clk := coordinatortest.NewClock()
			fc := newTestCoordinator(t, kind.make(t, clk)).withFeed()
			p := tripPolicy()
			const maxAge = 20 * time.Millisecond
			b := newBreaker(t, fc, WithPolicy(p), WithAdmissionCache(maxAge))
			const scope = "fencing/quiet"
			admitN(t, b, scope, 1)
			eventually(t, "the feed follows the scope", func() bool { return followed(b, scope) })
			gen := tripAndRecover(t, fc, clk, scope, p)
			eventually(t, "the recovery to reach the cache", func() bool {
				f, _ := cached(b, scope)
				return f.gen == gen && f.state == closed
			})
			clk.Advance(p.Window + p.BucketWidth())
			eventually(t, "the quiet scope's entry to age out", func() bool { _, ok := cached(b, scope); return !ok })

			asked := fc.admits.Load()
			admitN(t, b, scope, 20)
			t.Logf("20 calls of the quiet scope after an idle window: %d asked the coordinator", fc.admits.Load()-asked)
			if got := fc.admits.Load() - asked; got > 1 {
				t.Errorf("20 calls of a quiet healthy scope after an idle window asked the coordinator %d times; want 1", got)
			}
		})
	}
}

// The feed died without a word, and another replica tripped the scope:
// the answer to this replica's next Record says open, with the end of the
// open period, and from then on its calls are rejected locally.
func TestRecordAnswerSayingOpenRejectsLocally(t *testing.T) {
	clk := coordinatortest.NewClock()
	m := memory.New(memory.WithClock(clk.Now))
	fc := newTestCoordinator(t, m).withFeed()
	p := tripPolicy()
	b := newBreaker(t, fc, WithPolicy(p))
	const scope = "fencing/record-says-open"
	admitN(t, b, scope, 1)
	eventually(t, "the feed follows the scope", func() bool { return followed(b, scope) })
	admitN(t, b, scope, 1)

	fc.silent.Store(true)
	tripScope(t, m, scope, p) // another replica
	admitN(t, b, scope, 1)    // answered locally, its Record says open
	eventually(t, "the Record's answer to reach the cache", func() bool {
		f, ok := cached(b, scope)
		return ok && f.state == open
	})
	asked := fc.admits.Load()
	for range 10 {
		_, err := admitCall(b, context.Background(), &call{scope: scope, method: testMethod})
		var oe *OpenError
		if !errors.As(err, &oe) || oe.RetryAfter <= 0 {
			t.Fatalf("admission after the Record said open: %v; want a rejection with RetryAfter", err)
		}
	}
	if got := fc.admits.Load() - asked; got != 0 {
		t.Errorf("10 rejections asked the coordinator %d times; want 0", got)
	}
}

// A failed probe doubles the open period: what this process knows says
// so, from the answer of the Settle, not from OpenFor, and a rejection
// while the coordinator is unreachable tells the caller.
func TestRetryAfterIsTheOpenPeriodOfTheAnswer(t *testing.T) {
	clk := coordinatortest.NewClock()
	_, tc := memoryWith(t, clk)
	p := tripPolicy()
	p.OpenFor = 2 * time.Second
	p.MaxOpenFor, p.BackoffAfter = 8*time.Second, 0
	b := newBreaker(t, tc, WithPolicy(p), WithCoordinatorBackoff(time.Millisecond))
	ctx := context.Background()
	const scope = "fencing/retry-after"
	tk, _ := admitCall(b, ctx, &call{scope: scope, method: testMethod})
	b.finish(ctx, tk, errTransport)
	eventually(t, "the trip", func() bool { return notClosed(b, scope) })
	clk.Advance(p.OpenFor)
	probe, err := admitCall(b, ctx, &call{scope: scope, method: testMethod})
	if err != nil || probe.fate != probing {
		t.Fatalf("probe: %+v, %v", probe, err)
	}
	b.finish(ctx, probe, errTransport)
	eventually(t, "the reopening", func() bool { f, _ := b.known.notClosed(scope); return f.state == open && f.gen > probe.gen })

	tc.set(modeFail)
	_, err = admitCall(b, ctx, &call{scope: scope, method: testMethod})
	var oe *OpenError
	if !errors.As(err, &oe) {
		t.Fatalf("admission after the reopening, coordinator down: %v; want a rejection", err)
	}
	if oe.RetryAfter <= p.OpenFor || oe.RetryAfter > 2*p.OpenFor {
		t.Errorf("RetryAfter %v after a reopening; want the doubled period, up to %v", oe.RetryAfter, 2*p.OpenFor)
	}
}
