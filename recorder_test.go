package cbgrpc

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/status"

	"github.com/cbgrpc/cbgrpc/coordinator"
	"github.com/cbgrpc/cbgrpc/coordinator/coordinatortest"
	cbredis "github.com/cbgrpc/cbgrpc/coordinator/redis"
	"github.com/cbgrpc/cbgrpc/internal/redistest"
)

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
// (until Close flushes them), but for the scope's first, which introduces
// this replica to the coordinator; a failure goes at once.
func TestSuccessesWaitFailuresDoNot(t *testing.T) {
	_, tc := memoryWith(t, coordinatortest.NewClock())
	b := newBreaker(t, tc, WithPolicy(quietPolicy()), WithRecordInterval(time.Hour))
	svc := &service{}
	client := testgrpc.NewTestServiceClient(dial(t, serveTest(t, svc), b))
	client.EmptyCall(context.Background(), &testpb.Empty{})
	eventually(t, "the first outcome, which introduces the replica", func() bool { return tc.recorded.Load() == 1 })
	for range 4 {
		client.EmptyCall(context.Background(), &testpb.Empty{})
	}
	time.Sleep(20 * time.Millisecond)
	if got := tc.records.Load(); got != 1 {
		t.Fatalf("%d Records of successes before the interval, want the introduction alone", got)
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

// TestSlowCallsGoAtOnce: under a policy with the slow-call rule, a slow
// call's outcome goes at once, as a failure's does, while quick successes
// wait: a brownout of latency is judged as soon as one of errors.
func TestSlowCallsGoAtOnce(t *testing.T) {
	_, tc := memoryWith(t, coordinatortest.NewClock())
	p := quietPolicy()
	p.SlowCallDuration, p.SlowCallRatio = 20*time.Millisecond, 0.5
	b := newBreaker(t, tc, WithPolicy(p), WithRecordInterval(time.Hour))
	call := b.UnaryClientInterceptor()
	var delay time.Duration
	invoke := func(context.Context, string, any, any, *grpc.ClientConn, ...grpc.CallOption) error {
		time.Sleep(delay)
		return nil
	}
	call(context.Background(), "/svc/Method", nil, nil, nil, invoke)
	eventually(t, "the first outcome, which introduces the replica", func() bool { return tc.recorded.Load() == 1 })
	for range 4 {
		call(context.Background(), "/svc/Method", nil, nil, nil, invoke)
	}
	time.Sleep(20 * time.Millisecond)
	if got := tc.records.Load(); got != 1 {
		t.Fatalf("%d Records of quick successes before the interval, want the introduction alone", got)
	}
	delay = p.SlowCallDuration
	call(context.Background(), "/svc/Method", nil, nil, nil, invoke)
	eventually(t, "the slow call to be sent, with the successes before it", func() bool { return tc.recorded.Load() == 6 })
}

// TestBusyScopeSendsFullBatches: with successes waiting up to the record
// interval (an hour here), a scope busier than the recorder holds sends
// full batches as they fill instead of dropping outcomes: 20,000
// successes through a recorder of 1,000, all but two partial batches sent
// before Close, none dropped, in Records of at most half of it.
func TestBusyScopeSendsFullBatches(t *testing.T) {
	_, tc := memoryWith(t, coordinatortest.NewClock())
	mt := newMetrics()
	// A loaded CI machine once made three admissions outlast the default
	// coordinator timeout before the feed came up: let through unadmitted,
	// by the failure policy, their outcomes are dropped by design. That is
	// not what this test is about.
	b := newBreaker(t, tc, WithPolicy(quietPolicy()), WithRecordInterval(time.Hour), WithQueueSize(1000), WithMeterProvider(mt.mp),
		WithCoordinatorTimeout(10*time.Second))
	ctx := context.Background()
	const n = 20000
	for i := range n {
		t, err := admitCall(b, ctx, &call{scope: "busy", method: "/s/M"})
		if err != nil {
			panic(err)
		}
		b.finish(ctx, t, nil)
		// The recorder's goroutine gets its turn five times a queue: on a
		// loaded CI machine one turn a half queue once came too late, and
		// the queue, bounded by design, dropped one outcome.
		if i%200 == 0 {
			time.Sleep(time.Millisecond)
		}
	}
	// What is below a full batch waits for the record interval: up to a
	// batch the loop holds and a list the calls fill, each short of the
	// 500 that make a full one (CI saw 19,500 not reached once).
	eventually(t, "the full batches to be sent", func() bool { return tc.recorded.Load() >= n-2*500 })
	dropped := mt.sum(t, "cbgrpc.outcomes.dropped")
	t.Logf("%d successes: %d recorded in %d Records before Close, %d dropped", n, tc.recorded.Load(), tc.records.Load(), dropped)
	if dropped != 0 {
		t.Errorf("%d outcomes dropped; want none", dropped)
	}
	if avg := tc.recorded.Load() / max(tc.records.Load(), 1); avg > 500 {
		t.Errorf("%d outcomes a Record; want at most half the queue, 500", avg)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if got := tc.recorded.Load(); got != n {
		t.Errorf("%d recorded after Close in %d Records; want %d (dropped: %s)", got, tc.records.Load(), n, mt.drops(t))
	}
}

// TestQueueFullDrops: outcomes beyond the queue are dropped and counted,
// one by one also when equal successes waited as one run (waiting.go),
// and the calls are not slowed down.
func TestQueueFullDrops(t *testing.T) {
	for _, tc := range []struct {
		name         string
		queue, calls int
		fail         bool
	}{
		{"failures", 4, 30, true},
		// A larger queue lets runs form in the shards before the loop
		// takes them.
		{"runs of successes", 64, 300, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, co := memoryWith(t, coordinatortest.NewClock())
			gate := make(chan struct{})
			co.recordHook = func() { <-gate }
			mt := newMetrics()
			b := newBreaker(t, co, WithPolicy(quietPolicy()), WithQueueSize(tc.queue), WithMeterProvider(mt.mp), WithCoordinatorTimeout(time.Minute))
			svc := &service{}
			if tc.fail {
				svc.setErr(status.Error(codes.Unavailable, "down"))
			}
			client := testgrpc.NewTestServiceClient(dial(t, serveTest(t, svc), b))
			for range tc.calls {
				client.EmptyCall(context.Background(), &testpb.Empty{})
			}
			close(gate)
			if err := b.Close(); err != nil {
				t.Fatal(err)
			}
			dropped := mt.sum(t, "cbgrpc.outcomes.dropped", attrReason.String(dropQueueFull))
			if dropped == 0 {
				t.Errorf("no outcome dropped with a queue of %d and the coordinator stuck", tc.queue)
			}
			if got := co.recorded.Load() + dropped; got != int64(tc.calls) {
				t.Errorf("recorded %d + dropped %d = %d, want %d", co.recorded.Load(), dropped, got, tc.calls)
			}
		})
	}
}

// TestRunsOfSuccessesKeepOrderAndCount: equal successes wait as one run
// (waiting.go), but the coordinator hears every outcome, in the order the
// calls ended, and a run beyond the queue is dropped and counted outcome
// by outcome.
func TestRunsOfSuccessesKeepOrderAndCount(t *testing.T) {
	_, tc := memoryWith(t, coordinatortest.NewClock())
	b := newBreaker(t, tc, WithPolicy(quietPolicy()), WithRecordInterval(time.Hour))
	svc := &service{}
	client := testgrpc.NewTestServiceClient(dial(t, serveTest(t, svc), b))
	var want []bool // failures, in order
	for _, run := range []struct {
		fail bool
		n    int
	}{{false, 5}, {true, 1}, {false, 3}, {true, 2}, {false, 40}, {true, 1}} {
		if run.fail {
			svc.setErr(status.Error(codes.Unavailable, "down"))
		} else {
			svc.setErr(nil)
		}
		for range run.n {
			client.EmptyCall(context.Background(), &testpb.Empty{})
			want = append(want, run.fail)
		}
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	var got []bool
	for _, o := range tc.outcomes() {
		got = append(got, o.Failure)
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("the coordinator heard\n%v\nwant\n%v", got, want)
	}
}

// TestRecordRetrySameBatchID: a Record that failed in transit is retried
// once with the same batch ID, so the coordinator can tell a repeat.
func TestRecordRetrySameBatchID(t *testing.T) {
	_, tc := memoryWith(t, coordinatortest.NewClock())
	// Under the plain rules (Outliers 0) the first outcome is not sent at
	// once to introduce the replica: it waits for Close, after the
	// failure is armed, rather than race it.
	p := quietPolicy()
	p.Outliers = 0
	b := newBreaker(t, tc, WithPolicy(p))
	client := testgrpc.NewTestServiceClient(dial(t, serveTest(t, &service{}), b))
	client.EmptyCall(context.Background(), &testpb.Empty{})
	tc.failSends.Store(1)
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
	tk, err := admitCall(b, ctx, &call{scope: "close/race", method: testMethod})
	if err != nil {
		t.Fatal(err)
	}
	closed := make(chan error, 1)
	testHookRecorderAdd = func() {
		go func() { closed <- b.Close() }()
		// Until Close holds the recorder's shards to mark them closed: it
		// then waits for this add's shard.
		for b.rec.smu.TryLock() {
			b.rec.smu.Unlock()
			runtime.Gosched()
		}
	}
	t.Cleanup(func() { testHookRecorderAdd = nil })
	b.finish(ctx, tk, nil)
	testHookRecorderAdd = nil
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	sent, dropped := tc.recorded.Load(), mt.sum(t, "cbgrpc.outcomes.dropped")
	if sent != 1 || dropped != 0 {
		t.Errorf("an outcome added while Close ran: %d sent, %d dropped; want it sent by Close's flush", sent, dropped)
	}
}

// blame names the call that caused a Record's trip: the failing (or slow)
// call whose outcome tipped the window, or the last one counted before it,
// preferring a sampled trace; and links to the other traced calls.
func TestBlame(t *testing.T) {
	const g, trip = 10, 20
	sampled := func(i byte) trace.SpanContext {
		return trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{i}, SpanID: trace.SpanID{i}, TraceFlags: trace.FlagsSampled})
	}
	unsampled := func(i byte) trace.SpanContext {
		return trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{i}, SpanID: trace.SpanID{i}})
	}
	ok := coordinator.Outcome{Generation: g}
	fail := coordinator.Outcome{Generation: g, Failure: true}
	slow := coordinator.Outcome{Generation: g, Duration: time.Second}
	old := coordinator.Outcome{Generation: g - 1, Failure: true}
	tripped := &coordinator.Transition{From: closed, To: open, Generation: trip}
	p := coordinator.DefaultPolicy()
	p.SlowCallDuration, p.SlowCallRatio = time.Second, 0.5

	for _, c := range []struct {
		name     string
		outcomes []coordinator.Outcome
		callers  []trace.SpanContext
		a        answer
		cause    int // index of the parent in callers; -1: none
	}{
		{"the failure that tipped it, not the stale ones after",
			[]coordinator.Outcome{ok, fail, fail, ok}, []trace.SpanContext{sampled(1), sampled(2), sampled(3), sampled(4)},
			answer{transition: tripped, stale: 2}, 1},
		{"outcomes of an older generation are stale before the tip too",
			[]coordinator.Outcome{old, fail, fail, old}, []trace.SpanContext{sampled(1), sampled(2), sampled(3), sampled(4)},
			answer{transition: tripped, stale: 2}, 2},
		{"a success that reached MinCalls: the last failure before it",
			[]coordinator.Outcome{fail, ok, ok}, []trace.SpanContext{sampled(1), sampled(2), sampled(3)},
			answer{transition: tripped, stale: 1}, 0},
		{"a slow call tipped it",
			[]coordinator.Outcome{ok, slow}, []trace.SpanContext{sampled(1), sampled(2)},
			answer{transition: tripped, stale: 0}, 1},
		{"a sampled trace rather than the last failure's unsampled one",
			[]coordinator.Outcome{fail, fail}, []trace.SpanContext{sampled(1), unsampled(2)},
			answer{transition: tripped, stale: 0}, 0},
		{"a traced failure rather than the untraced one that tipped it",
			[]coordinator.Outcome{fail, fail}, []trace.SpanContext{unsampled(1), {}},
			answer{transition: tripped, stale: 0}, 0},
		{"nothing traced before the tip: the tipping call's own, none",
			[]coordinator.Outcome{ok, ok, fail}, []trace.SpanContext{{}, {}, sampled(3)},
			answer{transition: tripped, stale: 1}, 1},
		{"a stale count that does not add up: the last failure",
			[]coordinator.Outcome{fail, fail, ok}, []trace.SpanContext{sampled(1), sampled(2), sampled(3)},
			answer{transition: tripped, stale: 9}, 1},
		{"not a trip (an isolation that ended): the last failure",
			[]coordinator.Outcome{fail, ok}, []trace.SpanContext{sampled(1), sampled(2)},
			answer{transition: &coordinator.Transition{From: isolated, To: closed, Generation: trip}}, 0},
		{"no call traced",
			[]coordinator.Outcome{fail, fail}, nil,
			answer{transition: tripped}, -1},
	} {
		t.Run(c.name, func(t *testing.T) {
			parent, links := blame(c.outcomes, c.callers, c.a, p)
			want := trace.SpanContext{}
			if c.cause >= 0 {
				want = c.callers[c.cause]
			}
			if !parent.Equal(want) {
				t.Errorf("parent %v; want %v", parent.SpanID(), want.SpanID())
			}
			n := 0
			for i, sc := range c.callers {
				if i != c.cause && sc.IsValid() {
					n++
				}
			}
			if len(links) != n {
				t.Errorf("%d links; want %d, the other traced calls", len(links), n)
			}
			for _, l := range links {
				if l.SpanContext.Equal(parent) || !l.SpanContext.IsValid() {
					t.Errorf("link to %v: the parent, or untraced", l.SpanContext.SpanID())
				}
			}
		})
	}
}

// A trip span links to at most maxLinks calls.
func TestBlameCapsLinks(t *testing.T) {
	outcomes := make([]coordinator.Outcome, 3*maxLinks)
	callers := make([]trace.SpanContext, len(outcomes))
	for i := range outcomes {
		outcomes[i] = coordinator.Outcome{Generation: 1, Failure: true}
		callers[i] = trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1}, SpanID: trace.SpanID{byte(i), 1}})
	}
	a := answer{transition: &coordinator.Transition{From: closed, To: open, Generation: 2}}
	if _, links := blame(outcomes, callers, a, coordinator.DefaultPolicy()); len(links) != maxLinks {
		t.Errorf("%d links; want %d", len(links), maxLinks)
	}
}

// TestABurstOverManyScopesKeepsItsOutcomes: a thousand scopes fail at
// once over real Redis. One Record each would all be in flight together,
// more than the go-redis client's pool holds, and those left waiting for a
// connection past the coordinator timeout dropped their failures (484 of
// 1,000 once). The recorder keeps at most maxSending Records in flight
// and queues the rest: every failure reaches Redis.
func TestABurstOverManyScopesKeepsItsOutcomes(t *testing.T) {
	srv := redistest.Start(t)
	tc := newTestCoordinator(t, cbredis.New(srv.Client(t)))
	mt := newMetrics()
	// A second per Record: on a loaded machine the default timeout dropped
	// batches, which is the coordinator failing, not the burst.
	b := newBreaker(t, tc, WithMeterProvider(mt.mp), WithCoordinatorTimeout(time.Second))
	ctx := context.Background()
	const n = 1000
	tickets := make([]*call, n)
	for i := range tickets {
		tk, err := admitCall(b, ctx, &call{scope: fmt.Sprintf("burst-%d", i), method: "/s/M"})
		if err != nil || tk.fate != recorded {
			t.Fatalf("admission %d: %+v, %v; want it admitted by the coordinator", i, tk, err)
		}
		tickets[i] = tk
	}
	fail := status.Error(codes.Unavailable, "down")
	var wg sync.WaitGroup
	for _, tk := range tickets {
		wg.Go(func() { b.finish(ctx, tk, fail) })
	}
	wg.Wait()
	// Every outcome recorded or dropped, however slow the machine.
	for deadline := time.Now().Add(time.Minute); tc.recorded.Load()+mt.sum(t, "cbgrpc.outcomes.dropped") < n; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d failures recorded or dropped after a minute", tc.recorded.Load()+mt.sum(t, "cbgrpc.outcomes.dropped"), n)
		}
	}
	if dropped := mt.sum(t, "cbgrpc.outcomes.dropped"); dropped != 0 {
		t.Errorf("%d outcomes dropped; want none", dropped)
	}
	if most, limit := tc.maxInflight.Load(), int64(b.rec.maxSending); most > limit {
		t.Errorf("%d Records in flight at once; want at most %d", most, limit)
	}
	t.Logf("%d failures in %d Records, at most %d in flight", tc.recorded.Load(), tc.records.Load(), tc.maxInflight.Load())
}
