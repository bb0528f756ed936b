package cbgrpc

import (
	"context"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/status"

	"github.com/cbgrpc/cbgrpc/coordinator"
	"github.com/cbgrpc/cbgrpc/coordinator/coordinatortest"
)

// quietPolicy never trips in these tests, so every outcome counts.
func quietPolicy() coordinator.Policy {
	p := coordinator.DefaultPolicy()
	p.MinCalls = 1_000_000
	return p
}

// TestGroupCommit: while one Record of a scope is in flight, outcomes
// accumulate, and go in one next Record as soon as it returns.
func TestGroupCommit(t *testing.T) {
	_, tc := memoryWith(t, coordinatortest.NewClock())
	gate := make(chan struct{})
	var first atomic.Bool
	tc.recordHook = func() {
		if first.CompareAndSwap(false, true) {
			<-gate
		}
	}
	// A Record held back by the test must not time out.
	b := newBreaker(t, tc, WithPolicy(quietPolicy()), WithRecordInterval(time.Hour), WithCoordinatorTimeout(time.Minute))
	svc := &service{}
	svc.setErr(status.Error(codes.Unavailable, "down"))
	client := testgrpc.NewTestServiceClient(dial(t, serveTest(t, svc), b))
	call := func() { client.EmptyCall(context.Background(), &testpb.Empty{}) }

	call()
	eventually(t, "the first Record", func() bool { return tc.records.Load() == 1 })
	for range 20 {
		call()
	}
	time.Sleep(20 * time.Millisecond) // the 20 must not start Records of their own
	if got := tc.records.Load(); got != 1 {
		t.Fatalf("%d Records while one was in flight, want 1", got)
	}
	close(gate)
	eventually(t, "the accumulated batch", func() bool { return tc.recorded.Load() == 21 })
	if got := tc.records.Load(); got != 2 {
		t.Errorf("%d Records for 21 failures, want 2", got)
	}
	if got := tc.maxInflight.Load(); got != 1 {
		t.Errorf("%d Records in flight at once, want 1", got)
	}
}

// TestSuccessesWaitFailuresDoNot: with a long interval, successes wait
// (until Close flushes them); a failure goes at once.
func TestSuccessesWaitFailuresDoNot(t *testing.T) {
	_, tc := memoryWith(t, coordinatortest.NewClock())
	b := newBreaker(t, tc, WithPolicy(quietPolicy()), WithRecordInterval(time.Hour))
	svc := &service{}
	client := testgrpc.NewTestServiceClient(dial(t, serveTest(t, svc), b))
	for range 5 {
		client.EmptyCall(context.Background(), &testpb.Empty{})
	}
	time.Sleep(20 * time.Millisecond)
	if got := tc.records.Load(); got != 0 {
		t.Fatalf("%d Records of successes before the interval, want 0", got)
	}
	svc.setErr(status.Error(codes.Internal, "broken"))
	client.EmptyCall(context.Background(), &testpb.Empty{})
	eventually(t, "the failure to be sent", func() bool { return tc.recorded.Load() == 6 })
	svc.setErr(nil)
	client.EmptyCall(context.Background(), &testpb.Empty{})
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if got := tc.recorded.Load(); got != 7 {
		t.Errorf("Close flushed to %d outcomes, want 7", got)
	}
}

// TestQueueFullDrops: outcomes beyond the queue are dropped and counted,
// and the calls are not slowed down.
func TestQueueFullDrops(t *testing.T) {
	_, tc := memoryWith(t, coordinatortest.NewClock())
	gate := make(chan struct{})
	tc.recordHook = func() { <-gate }
	mt := newMetrics()
	b := newBreaker(t, tc, WithPolicy(quietPolicy()), WithQueueSize(4), WithMeterProvider(mt.mp), WithCoordinatorTimeout(time.Minute))
	svc := &service{}
	svc.setErr(status.Error(codes.Unavailable, "down"))
	client := testgrpc.NewTestServiceClient(dial(t, serveTest(t, svc), b))
	for range 30 {
		client.EmptyCall(context.Background(), &testpb.Empty{})
	}
	close(gate)
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	dropped := mt.sum(t, "cbgrpc.outcomes.dropped", attrReason.String(dropQueueFull))
	if dropped == 0 {
		t.Error("no outcome dropped with a queue of 4 and the coordinator stuck")
	}
	if got := tc.recorded.Load() + dropped; got != 30 {
		t.Errorf("recorded %d + dropped %d = %d, want 30", tc.recorded.Load(), dropped, got)
	}
}

// TestRecordRetrySameBatchID: a Record that failed in transit is retried
// once with the same batch ID, so the coordinator can tell a repeat.
func TestRecordRetrySameBatchID(t *testing.T) {
	_, tc := memoryWith(t, coordinatortest.NewClock())
	b := newBreaker(t, tc, WithPolicy(quietPolicy()))
	client := testgrpc.NewTestServiceClient(dial(t, serveTest(t, &service{}), b))
	client.EmptyCall(context.Background(), &testpb.Empty{})
	tc.failNext.Store(1)
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if got := tc.records.Load(); got != 2 {
		t.Fatalf("%d Records, want 2 (one retry)", got)
	}
	ids := 0
	tc.batchIDs.Range(func(id, n any) bool {
		ids++
		if id == "" || n.(*atomic.Int64).Load() != 2 {
			t.Errorf("batch %q sent %d times, want a non-empty ID sent twice", id, n.(*atomic.Int64).Load())
		}
		return true
	})
	if ids != 1 {
		t.Errorf("%d batch IDs, want 1", ids)
	}
	if got := tc.recorded.Load(); got != 1 {
		t.Errorf("%d outcomes recorded, want 1", got)
	}
}

// TestCallsAfterCloseRunUnprotected: after Close calls run unprotected and
// nothing is left running.
func TestCallsAfterCloseRunUnprotected(t *testing.T) {
	_, tc := memoryWith(t, coordinatortest.NewClock())
	b := newBreaker(t, tc)
	client := testgrpc.NewTestServiceClient(dial(t, serveTest(t, &service{}), b))
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := client.EmptyCall(context.Background(), &testpb.Empty{}); err != nil {
		t.Fatal(err)
	}
	if tc.admits.Load() != 0 {
		t.Error("a call after Close asked the coordinator")
	}
}

// An outcome handed to the recorder while Close runs is sent or counted as
// dropped, never lost. The interleaving is forced: Close starts after add
// has seen the recorder open and before add has queued the outcome.
func TestOutcomeRacingCloseIsNeverLost(t *testing.T) {
	_, tc := memoryWith(t, coordinatortest.NewClock())
	mt := newMetrics()
	b := newBreaker(t, tc, WithPolicy(quietPolicy()), WithRecordInterval(time.Hour), WithMeterProvider(mt.mp))
	ctx := context.Background()
	tk, err := b.admit(ctx, "close/race")
	if err != nil {
		t.Fatal(err)
	}
	closed := make(chan error, 1)
	testHookRecorderAdd = func() {
		go func() { closed <- b.Close() }()
		// Until Close waits to mark the recorder closed: a writer is then
		// pending, and a new reader is refused.
		for b.rec.mu.TryRLock() {
			b.rec.mu.RUnlock()
			runtime.Gosched()
		}
	}
	t.Cleanup(func() { testHookRecorderAdd = nil })
	b.finish(ctx, tk, "/m", nil)
	testHookRecorderAdd = nil
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	sent, dropped := tc.recorded.Load(), mt.sum(t, "cbgrpc.outcomes.dropped")
	if sent != 1 || dropped != 0 {
		t.Errorf("an outcome added while Close ran: %d sent, %d dropped; want it sent by Close's flush", sent, dropped)
	}
}
