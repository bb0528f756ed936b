package cbgrpc

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/status"

	"github.com/cbgrpc/cbgrpc/coordinator"
	"github.com/cbgrpc/cbgrpc/coordinator/coordinatortest"
	"github.com/cbgrpc/cbgrpc/coordinator/memory"
	"github.com/cbgrpc/cbgrpc/internal/instant"
)

// TestCoordinatorDown checks rules 1 and 2 of "When the coordinator
// fails" (docs/architecture.md) for each failure policy: a scope last seen
// open is rejected whatever the policy; a scope never seen open follows it.
func TestCoordinatorDown(t *testing.T) {
	for _, policy := range []FailurePolicy{FailOpen, FailClosed} {
		t.Run(policy.String(), func(t *testing.T) {
			_, tc := memoryWith(t, coordinatortest.NewClock())
			tr := newTracing()
			mt := newMetrics()
			p := tripPolicy()
			b := newBreaker(t, tc, WithPolicy(p), WithCoordinatorFailure(policy), WithTracerProvider(tr.tp), WithMeterProvider(mt.mp))
			svc := &service{}
			cc := dial(t, serveTest(t, svc), b)
			client := testgrpc.NewTestServiceClient(cc)
			bg := context.Background()
			tripped := ScopeByMethod(bg, cc.Target(), "/grpc.testing.TestService/EmptyCall")

			svc.setErr(status.Error(codes.Unavailable, "down"))
			client.EmptyCall(bg, &testpb.Empty{})
			eventually(t, "the Breaker to learn the scope is open", func() bool { return notClosed(b, tripped) })
			svc.setErr(nil)

			tc.set(modeFail)
			reached := svc.calls.Load()
			ctx, span := tr.tp.Tracer("test").Start(bg, "caller")
			_, err := client.EmptyCall(ctx, &testpb.Empty{})
			span.End()
			if !errors.Is(err, ErrOpen) || !strings.Contains(err.Error(), "coordinator unavailable") {
				t.Errorf("known-open scope while the coordinator is down: %v, want ErrOpen naming the coordinator", err)
			}
			if svc.calls.Load() != reached {
				t.Errorf("the rejected call reached the server")
			}
			if got := len(tr.events(eventCoordinatorFailure)); got != 1 {
				t.Errorf("%d coordinator-failure events on the caller's span, want 1", got)
			}
			if got := len(tr.events(eventRejected)); got != 1 {
				t.Errorf("%d rejection events on the caller's span, want 1", got)
			}

			// Another method: a scope this process never saw open.
			_, err = client.UnaryCall(bg, &testpb.SimpleRequest{})
			switch policy {
			case FailOpen:
				if err != nil {
					t.Errorf("unknown scope, fail-open: %v, want the call to go through", err)
				}
				// Let through without a generation, its outcome cannot be
				// recorded: it is counted as dropped, not silently lost.
				if got := mt.sum(t, "cbgrpc.outcomes.dropped", attrReason.String(dropUnadmitted)); got != 1 {
					t.Errorf("outcomes dropped as not admitted = %d, want 1", got)
				}
			case FailClosed:
				if !errors.Is(err, ErrOpen) {
					t.Errorf("unknown scope, fail-closed: %v, want ErrOpen", err)
				}
			}
			if got := mt.sum(t, "cbgrpc.decisions", attrSource.String(byKnownState.String()), attrVerdict.String("reject")); got != 1 {
				t.Errorf("decisions by known state = %d, want 1", got)
			}
			if got := mt.sum(t, "cbgrpc.decisions", attrSource.String(byFailurePolicy.String())); got != 1 {
				t.Errorf("decisions by failure policy = %d, want 1", got)
			}
		})
	}
}

// TestKnownScopeForgottenWhenSeenClosed: once the coordinator says a scope
// is closed again, a coordinator outage treats it as any other scope.
func TestKnownScopeForgottenWhenSeenClosed(t *testing.T) {
	clk := coordinatortest.NewClock()
	_, tc := memoryWith(t, clk)
	p := tripPolicy()
	b := newBreaker(t, tc, WithPolicy(p))
	svc := &service{}
	cc := dial(t, serveTest(t, svc), b)
	client := testgrpc.NewTestServiceClient(cc)
	bg := context.Background()
	scope := ScopeByMethod(bg, cc.Target(), "/grpc.testing.TestService/EmptyCall")

	svc.setErr(status.Error(codes.Unavailable, "down"))
	client.EmptyCall(bg, &testpb.Empty{})
	eventually(t, "open", func() bool { return notClosed(b, scope) })
	svc.setErr(nil)
	clk.Advance(p.OpenFor)
	if _, err := client.EmptyCall(bg, &testpb.Empty{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "closed", func() bool { return !notClosed(b, scope) })
	tc.set(modeFail)
	if _, err := client.EmptyCall(bg, &testpb.Empty{}); err != nil {
		t.Errorf("closed scope, coordinator down, fail-open: %v", err)
	}
}

// TestCompletedCallNeverFailsBecauseRecordingFailed: Record and Settle fail
// or hang, and calls still return their own result, at once.
func TestCompletedCallNeverFailsBecauseRecordingFailed(t *testing.T) {
	_, tc := memoryWith(t, coordinatortest.NewClock())
	defer tc.unblock()
	mt := newMetrics()
	b := newBreaker(t, tc, WithMeterProvider(mt.mp), WithCoordinatorBackoff(time.Millisecond))
	svc := &service{}
	client := testgrpc.NewTestServiceClient(dial(t, serveTest(t, svc), b))
	tc.failRecords.Store(true)
	for i := range 20 {
		if i == 10 {
			svc.setErr(status.Error(codes.NotFound, "no such thing"))
		}
		_, err := client.EmptyCall(context.Background(), &testpb.Empty{})
		if i < 10 && err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
		if i >= 10 && status.Code(err) != codes.NotFound {
			t.Fatalf("call %d: %v, want the server's NotFound", i, err)
		}
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if got := mt.sum(t, "cbgrpc.outcomes.dropped"); got != 20 {
		t.Errorf("dropped outcomes = %d, want 20", got)
	}
}

// TestAdmitRetriedOnceWithSameClaim: a transport error is retried once,
// with the same claim, so a lost answer cannot take a second probe slot.
func TestAdmitRetriedOnceWithSameClaim(t *testing.T) {
	_, tc := memoryWith(t, coordinatortest.NewClock())
	b := newBreaker(t, tc)
	client := testgrpc.NewTestServiceClient(dial(t, serveTest(t, &service{}), b))
	tc.failAdmits.Store(1)
	if _, err := client.EmptyCall(context.Background(), &testpb.Empty{}); err != nil {
		t.Fatal(err)
	}
	if got := tc.admits.Load(); got != 2 {
		t.Errorf("Admit called %d times, want 2 (one retry)", got)
	}
	claims := 0
	tc.claims.Range(func(_, n any) bool {
		claims++
		return true
	})
	if claims != 1 {
		t.Errorf("%d claims for one call, want 1", claims)
	}
	if b.health.Down() {
		t.Errorf("a retried success put the coordinator in back-off")
	}

	// Two transport errors: retried once, then the failure policy decides.
	tc.failAdmits.Store(2)
	before := tc.admits.Load()
	if _, err := client.EmptyCall(context.Background(), &testpb.Empty{}); err != nil {
		t.Fatalf("fail-open: %v", err)
	}
	if got := tc.admits.Load() - before; got != 2 {
		t.Errorf("Admit called %d times, want 2", got)
	}
}

// TestAdmissionBoundedWhenCoordinatorIgnoresDeadline: a coordinator that
// hangs regardless of its context (a paused Redis behind a default go-redis
// client) costs a call at most the coordinator timeout, is not retried, and
// then the back-off spares the following calls.
func TestAdmissionBoundedWhenCoordinatorIgnoresDeadline(t *testing.T) {
	_, tc := memoryWith(t, coordinatortest.NewClock())
	defer tc.unblock()
	const timeout = 50 * time.Millisecond
	b := newBreaker(t, tc, WithCoordinatorTimeout(timeout), WithCoordinatorBackoff(time.Hour))
	client := testgrpc.NewTestServiceClient(dial(t, serveTest(t, &service{}), b))
	client.EmptyCall(context.Background(), &testpb.Empty{}) // connect

	tc.set(modeBlock)
	start := time.Now()
	if _, err := client.EmptyCall(context.Background(), &testpb.Empty{}); err != nil {
		t.Fatalf("fail-open call: %v", err)
	}
	if d := time.Since(start); d > timeout+250*time.Millisecond {
		t.Errorf("call took %v with a hung coordinator, want about %v", d, timeout)
	}
	start = time.Now()
	for range 10 {
		client.EmptyCall(context.Background(), &testpb.Empty{})
	}
	// The Admit count below is the exact check; this one is loose so that
	// a loaded machine does not fail it.
	if d := time.Since(start); d > 5*timeout {
		t.Errorf("10 calls during the back-off took %v, want them not to wait for the coordinator", d)
	}
	if got := tc.admits.Load(); got != 2 {
		t.Errorf("Admit called %d times, want 2 (the connect, the timed-out one; no retry, none in back-off)", got)
	}
	tc.unblock()
}

// TestBackoffBoundsDeadCoordinatorCost measures what a hung coordinator
// adds to calls made by 8 concurrent callers over 1.2s: with the back-off,
// about one timeout per back-off period, not one per call.
func TestBackoffBoundsDeadCoordinatorCost(t *testing.T) {
	if testing.Short() {
		t.Skip("timing")
	}
	_, tc := memoryWith(t, coordinatortest.NewClock())
	defer tc.unblock()
	const (
		timeout = 50 * time.Millisecond
		backoff = 200 * time.Millisecond
		run     = 1200 * time.Millisecond
		callers = 8
	)
	b := newBreaker(t, tc, WithCoordinatorTimeout(timeout), WithCoordinatorBackoff(backoff))
	client := testgrpc.NewTestServiceClient(dial(t, serveTest(t, &service{}), b))
	client.EmptyCall(context.Background(), &testpb.Empty{}) // connect

	tc.set(modeBlock)
	asked := tc.admits.Load()
	var (
		mu        sync.Mutex
		latencies []time.Duration
		wg        sync.WaitGroup
	)
	end := time.Now().Add(run)
	for range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(end) {
				start := time.Now()
				if _, err := client.EmptyCall(context.Background(), &testpb.Empty{}); err != nil {
					t.Errorf("fail-open call: %v", err)
					return
				}
				mu.Lock()
				latencies = append(latencies, time.Since(start))
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	sort.Slice(latencies, func(i, j int) bool { return latencies[i] < latencies[j] })
	// Each Admit that reached the hung coordinator cost its call the
	// timeout; the others decided at once.
	slow := int(tc.admits.Load() - asked)
	var total time.Duration
	for _, d := range latencies {
		total += d
	}
	periods := int(run/backoff) + 1
	t.Logf("%d calls in %v by %d callers: %d asked the hung coordinator (about %v added in all); latency mean %v, p50 %v, p99 %v, max %v",
		len(latencies), run, callers, slow, time.Duration(slow)*timeout, total/time.Duration(len(latencies)),
		latencies[len(latencies)/2], latencies[len(latencies)*99/100], latencies[len(latencies)-1])
	// The calls already waiting when the coordinator hung all pay once;
	// after that, one call per back-off period (twice over: generous).
	if want := callers + 2*periods; slow > want {
		t.Errorf("%d calls waited for the hung coordinator, want at most %d (%d callers + one per %v back-off)", slow, want, callers, backoff)
	}
	if max := latencies[len(latencies)-1]; max > timeout+250*time.Millisecond {
		t.Errorf("slowest call took %v, want about the %v timeout at most", max, timeout)
	}
	tc.unblock()
}

// TestCoordinatorRecovers: after the back-off, one call asks again, and a
// working coordinator is used from then on.
func TestCoordinatorRecovers(t *testing.T) {
	_, tc := memoryWith(t, coordinatortest.NewClock())
	b := newBreaker(t, tc, WithCoordinatorBackoff(20*time.Millisecond))
	client := testgrpc.NewTestServiceClient(dial(t, serveTest(t, &service{}), b))
	tc.set(modeFail)
	client.EmptyCall(context.Background(), &testpb.Empty{})
	if !b.health.Down() {
		t.Fatal("no back-off after a failure")
	}
	tc.set(modeOK)
	eventually(t, "the coordinator to be used again", func() bool {
		client.EmptyCall(context.Background(), &testpb.Empty{})
		return !b.health.Down()
	})
}

// TestInvalidPolicyAtCoordinatorNotRetried: a coordinator that rejects the
// policy is not asked twice.
func TestInvalidPolicyAtCoordinatorNotRetried(t *testing.T) {
	_, tc := memoryWith(t, coordinatortest.NewClock())
	tc.admitted = func(coordinator.AdmitRequest) (coordinator.Decision, error, bool) {
		return coordinator.Decision{}, &coordinator.PolicyError{Field: "Window", Reason: "test"}, true
	}
	b := newBreaker(t, tc)
	client := testgrpc.NewTestServiceClient(dial(t, serveTest(t, &service{}), b))
	client.EmptyCall(context.Background(), &testpb.Empty{})
	if got := tc.admits.Load(); got != 1 {
		t.Errorf("Admit called %d times with an invalid policy, want 1", got)
	}
}

// A coordinator that panics is a coordinator failure: the process survives
// and the failure policy decides.
func TestPanickingCoordinatorIsACoordinatorFailure(t *testing.T) {
	_, tc := memoryWith(t, coordinatortest.NewClock())
	// As a coordinator with a nil client would.
	tc.admitted = func(coordinator.AdmitRequest) (coordinator.Decision, error, bool) { panic("no client") }
	mt := newMetrics()
	b := newBreaker(t, tc, WithCoordinatorFailure(FailClosed), WithMeterProvider(mt.mp))
	_, err := admitCall(b, context.Background(), &call{scope: "panics", method: testMethod})
	if !errors.Is(err, ErrOpen) {
		t.Fatalf("admission over a panicking coordinator: %v, want a fail-closed rejection", err)
	}
	if got := mt.sum(t, "cbgrpc.coordinator.errors"); got != 1 {
		t.Errorf("coordinator errors = %d, want 1 (the panic, not retried)", got)
	}
}

// One scope with broken data is decided by the failure policy, alone: the
// coordinator still answers for every other scope, so there is no back-off.
func TestCorruptScopeDoesNotBackOffOtherScopes(t *testing.T) {
	_, tc := memoryWith(t, coordinatortest.NewClock())
	// One scope's state is unusable.
	tc.admitted = func(q coordinator.AdmitRequest) (coordinator.Decision, error, bool) {
		return coordinator.Decision{}, fmt.Errorf("test: %w: WRONGTYPE", coordinator.ErrCorruptState), q.Scope == "broken"
	}
	b := newBreaker(t, tc, WithCoordinatorFailure(FailClosed), WithCoordinatorBackoff(time.Hour))
	ctx := context.Background()
	if _, err := admitCall(b, ctx, &call{scope: "broken", method: testMethod}); !errors.Is(err, ErrOpen) {
		t.Fatalf("admission of the broken scope, fail-closed: %v, want ErrOpen", err)
	}
	if b.health.InBackoff() {
		t.Fatal("one scope's broken data put the whole Breaker in back-off")
	}
	asked := tc.admits.Load()
	if _, err := admitCall(b, ctx, &call{scope: "healthy", method: testMethod}); err != nil {
		t.Fatalf("admission of a healthy scope: %v", err)
	}
	if tc.admits.Load() != asked+1 {
		t.Error("the healthy scope was not decided by the coordinator")
	}
	if _, err := admitCall(b, ctx, &call{scope: "broken", method: testMethod}); !errors.Is(err, ErrOpen) {
		t.Errorf("the broken scope again: %v, want ErrOpen", err)
	}
	if got := tc.admits.Load() - asked; got != 2 {
		t.Errorf("coordinator asked %d times for two admissions, want 2 (no retry of a corrupt scope)", got)
	}
}

// New warms the coordinator up with one read-only call, so that the first
// admission does not pay for the first connection.
func TestNewWarmsUpTheCoordinator(t *testing.T) {
	_, tc := memoryWith(t, coordinatortest.NewClock())
	newBreaker(t, tc)
	eventually(t, "the warm-up call", func() bool { return tc.snapshots.Load() == 1 })
	if n := tc.admits.Load() + tc.records.Load() + tc.settles.Load(); n != 0 {
		t.Errorf("the warm-up changed state: %d admits, records or settles", n)
	}
}

// A Record answer computed before a trip ("closed") that arrives after
// this process learned of the trip must not erase it: in a later outage
// the scope is still rejected, whatever the failure policy.
func TestStaleClosedAnswerNeverErasesOpen(t *testing.T) {
	clk := coordinatortest.NewClock()
	m, tc := memoryWith(t, clk)
	// The answer of one Record is held back after the coordinator
	// computed it, as a slow network would.
	var hold atomic.Bool
	held, release := make(chan struct{}), make(chan struct{})
	tc.answered = func(op string, _ coordinator.Result) {
		if op == "record" && hold.CompareAndSwap(true, false) {
			held <- struct{}{}
			<-release
		}
	}
	p := tripPolicy()
	b := newBreaker(t, tc, WithPolicy(p), WithCoordinatorTimeout(time.Hour), WithCoordinatorFailure(FailOpen))
	ctx := context.Background()
	const scope = "fencing/late-closed"
	tk, err := admitCall(b, ctx, &call{scope: scope, method: testMethod})
	if err != nil {
		t.Fatal(err)
	}
	hold.Store(true)
	b.finish(ctx, tk, nil)
	<-held // computed: closed, in tk's generation

	// Another replica trips the scope; this one learns it from its own
	// admission.
	if res, _ := m.Record(ctx, coordinator.RecordRequest{Scope: scope, Policy: p, Outcomes: []coordinator.Outcome{{Generation: tk.gen, Failure: true}}}); res.State != open {
		t.Fatalf("trip: %+v", res)
	}
	if _, err := admitCall(b, ctx, &call{scope: scope, method: testMethod}); !errors.Is(err, ErrOpen) {
		t.Fatalf("admission after the trip: %v; want ErrOpen", err)
	}
	close(release)
	// Close waits for the late answer to be learned; what the table knows
	// stays, and decides a call as in an outage.
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if err := b.decideWithout(ctx, routed(b, &call{scope: scope, method: testMethod, start: instant.Now()}), errTransport); !errors.Is(err, ErrOpen) {
		t.Errorf("known-open scope with the coordinator down, after a late closed answer: %v; want ErrOpen", err)
	}
}

// With FailClosed, a scope is never admitted without the coordinator, not
// even from what the table knows once the back-off has ended: from the
// first error until a coordinator call succeeds, the table answers
// nothing.
func TestFailClosedNeverBypassedAfterTheBackoff(t *testing.T) {
	fc := newTestCoordinator(t, memory.New()).withFeed()
	b := newBreaker(t, fc, WithPolicy(tripPolicy()), WithCoordinatorFailure(FailClosed), WithCoordinatorBackoff(10*time.Millisecond))
	ctx := context.Background()
	const scope = "fencing/fail-closed"
	admitN(t, b, scope, 1)
	eventually(t, "the feed follows the scope", func() bool { return followed(b, scope) })
	admitN(t, b, scope, 1)
	if _, ok := cached(b, scope); !ok {
		t.Fatal("closed scope not cached")
	}

	fc.set(modeFail)
	admitN(t, b, scope, 1) // from the table; its Record fails
	eventually(t, "the coordinator error", func() bool { return !b.health.Trusted() })
	eventually(t, "the back-off to end", func() bool { return !b.health.InBackoff() })
	for i := range 20 {
		if _, err := admitCall(b, ctx, &call{scope: scope, method: testMethod}); !errors.Is(err, ErrOpen) {
			t.Fatalf("call %d after the back-off, coordinator still failing, fail-closed: %v; want ErrOpen", i, err)
		}
	}
}
