package cbgrpc

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"google.golang.org/grpc/codes"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/status"

	"github.com/cbgrpc/cbgrpc/coordinator"
	cbredis "github.com/cbgrpc/cbgrpc/coordinator/redis"
	"github.com/cbgrpc/cbgrpc/internal/redistest"
)

// The same rules as over memory, against a real redis-server that the
// tests stop and pause. The clients are go-redis defaults, as a user's
// would be: no ContextTimeoutEnabled.

// TestRedisStoppedKnownOpenRejected: with redis-server gone, a scope last
// seen open is rejected whatever the policy; another follows the policy.
func TestRedisStoppedKnownOpenRejected(t *testing.T) {
	for _, policy := range []FailurePolicy{FailOpen, FailClosed} {
		t.Run(policy.String(), func(t *testing.T) {
			srv := redistest.Start(t)
			p := tripPolicy()
			b := newBreaker(t, cbredis.New(srv.Client(t)), WithPolicy(p), WithCoordinatorFailure(policy))
			svc := &service{}
			client := testgrpc.NewTestServiceClient(dial(t, serveTest(t, svc), b))
			bg := context.Background()

			svc.setErr(status.Error(codes.Unavailable, "down"))
			client.EmptyCall(bg, &testpb.Empty{})
			eventually(t, "the breaker to open", func() bool {
				_, err := client.EmptyCall(bg, &testpb.Empty{})
				return errors.Is(err, ErrOpen)
			})
			svc.setErr(nil)

			srv.Stop()
			reached := svc.calls.Load()
			for range 3 { // the first asks the dead server, the rest are in back-off
				_, err := client.EmptyCall(bg, &testpb.Empty{})
				if !errors.Is(err, ErrOpen) {
					t.Fatalf("known-open scope with Redis stopped: %v, want ErrOpen", err)
				}
			}
			if svc.calls.Load() != reached {
				t.Error("a rejected call reached the server")
			}
			_, err := client.UnaryCall(bg, &testpb.SimpleRequest{})
			if got, want := errors.Is(err, ErrOpen), policy == FailClosed; got != want {
				t.Errorf("unknown scope with Redis stopped, %v: rejected=%v (%v)", policy, got, err)
			}
		})
	}
}

// TestRedisPausedAdmissionBounded: a SIGSTOPped redis-server behind a
// default go-redis client (which would block a read for its 5s
// ReadTimeout) costs a call the coordinator timeout at most; then the
// back-off spares the following calls; and Close, with Redis still
// paused, waits for the stuck calls and leaves nothing behind.
func TestRedisPausedAdmissionBounded(t *testing.T) {
	srv := redistest.Start(t)
	rdb := goredis.NewClient(&goredis.Options{Addr: srv.Addr()})
	defer rdb.Close()
	const timeout = 50 * time.Millisecond
	b := newBreaker(t, cbredis.New(rdb), WithCoordinatorTimeout(timeout))
	client := testgrpc.NewTestServiceClient(dial(t, serveTest(t, &service{}), b))
	if _, err := client.EmptyCall(context.Background(), &testpb.Empty{}); err != nil {
		t.Fatal(err)
	}

	srv.Pause()
	defer srv.Resume()
	var worst time.Duration
	start := time.Now()
	calls := 0
	for time.Since(start) < 300*time.Millisecond {
		t0 := time.Now()
		if _, err := client.EmptyCall(context.Background(), &testpb.Empty{}); err != nil {
			t.Fatalf("fail-open call with Redis paused: %v", err)
		}
		worst = max(worst, time.Since(t0))
		calls++
	}
	t.Logf("Redis paused: %d calls in 300ms, slowest %v (timeout %v)", calls, worst, timeout)
	if worst > timeout+250*time.Millisecond {
		t.Errorf("slowest call with Redis paused took %v, want about %v", worst, timeout)
	}

	// Redis stays paused: Close must outwait the reads stuck for go-redis's
	// ReadTimeout, within its own bound.
	t0 := time.Now()
	if err := b.Close(); err != nil {
		t.Errorf("Close with Redis paused: %v", err)
	}
	t.Logf("Close with Redis paused took %v", time.Since(t0))
}

// TestRedisOneTripOneSpan: 8 replicas with their own Redis clients and
// tracer providers trip one scope together; one span shows it.
func TestRedisOneTripOneSpan(t *testing.T) {
	srv := redistest.Start(t)
	const replicas = 8
	p := coordinator.DefaultPolicy()
	p.MinCalls = 16
	svc := &service{}
	svc.setErr(status.Error(codes.Unavailable, "down"))
	addr := serveTest(t, svc)
	tracings := make([]*tracing, replicas)
	var wg sync.WaitGroup
	for i := range replicas {
		tracings[i] = newTracing()
		b := newBreaker(t, cbredis.New(srv.Client(t)), WithPolicy(p), WithTracerProvider(tracings[i].tp), WithRecordInterval(time.Millisecond))
		client := testgrpc.NewTestServiceClient(dial(t, addr, b))
		wg.Add(1)
		go func() {
			defer wg.Done()
			deadline := time.Now().Add(10 * time.Second)
			for time.Now().Before(deadline) {
				if _, err := client.EmptyCall(context.Background(), &testpb.Empty{}); errors.Is(err, ErrOpen) {
					return
				}
			}
			t.Errorf("replica never saw the breaker open")
		}()
	}
	wg.Wait()
	spans := 0
	for _, tr := range tracings {
		spans += len(tr.transitions(coordinator.StateClosed, coordinator.StateOpen))
	}
	if spans != 1 {
		t.Errorf("%d closed -> open spans across %d replicas, want exactly 1", spans, replicas)
	}
}

// TestRedisMemoryBoundedByScopesInUse drives 100,000 distinct scopes
// through one Breaker over Redis, with a 200ms window so that the run
// spans many windows: what the Breaker holds (its table, its feed's
// subscriptions on the server, its heap) stays bounded by the scopes
// called in the last window or so, and goes back to nothing once calls
// stop.
func TestRedisMemoryBoundedByScopesInUse(t *testing.T) {
	srv := redistest.Start(t)
	inspect := srv.Client(t)
	p := coordinator.DefaultPolicy()
	p.Window = 200 * time.Millisecond
	b := newBreaker(t, cbredis.New(srv.Client(t)), WithPolicy(p))
	ctx := context.Background()
	subscriptions := func() int {
		list, err := inspect.ClientList(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, line := range strings.Split(list, "\n") {
			for _, f := range strings.Fields(line) {
				if v, ok := strings.CutPrefix(f, "sub="); ok {
					k, _ := strconv.Atoi(v)
					n += k
				}
			}
		}
		return n
	}
	heap := func() uint64 {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return ms.HeapAlloc
	}

	const (
		total   = 100_000
		callers = 8
	)
	base := heap()
	var (
		next      atomic.Int64
		mu        sync.Mutex
		startedAt = make([]time.Time, 0, total) // when each scope had its call, in order
	)
	// recent counts the scopes called since the start of the table's
	// forgetting horizon, and all so far: a scope is forgotten a window
	// after its last call, at the next sweep (a quarter window later), and
	// a loaded machine (the race detector, 8 callers on 2 cores) may be
	// late by as much again.
	recent := func() (int, int) {
		mu.Lock()
		defer mu.Unlock()
		horizon := time.Now().Add(-2 * (p.Window + p.Window/4))
		i, _ := slices.BinarySearchFunc(startedAt, horizon, time.Time.Compare)
		return len(startedAt) - i, len(startedAt)
	}
	var peakTable, peakSubs, peakRecent int
	var peakHeap uint64
	sample := func() {
		table, subs := b.known.size(), subscriptions()
		r, all := recent()
		peakTable, peakSubs, peakRecent, peakHeap = max(peakTable, table), max(peakSubs, subs), max(peakRecent, r), max(peakHeap, heap())
		if table > r || subs > r {
			t.Errorf("after %d scopes: table %d, subscriptions %d; want at most the %d scopes called recently", all, table, subs, r)
		}
	}

	var wg sync.WaitGroup
	for range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1)
				if i > total {
					return
				}
				mu.Lock()
				startedAt = append(startedAt, time.Now())
				mu.Unlock()
				tk, err := b.admit(ctx, fmt.Sprintf("scale/%d", i))
				if err != nil {
					t.Errorf("scope %d: %v", i, err)
					return
				}
				b.finish(ctx, tk, "/m", nil)
			}
		}()
	}
	finished := waitGroupDone(&wg)
	for done := false; !done; {
		select {
		case <-time.After(100 * time.Millisecond):
		case <-finished:
			done = true
		}
		sample()
	}
	t.Logf("%d scopes: peak table %d, peak subscriptions %d, peak scopes called in the horizon %d, heap %d MiB at start, peak %d MiB",
		total, peakTable, peakSubs, peakRecent, base>>20, peakHeap>>20)
	eventually(t, "every scope to be forgotten and unfollowed", func() bool {
		return b.known.size() == 0 && subscriptions() == 0
	})
	if end := heap(); end > base+8<<20 {
		t.Errorf("heap %d MiB once every scope is forgotten; want back near the %d MiB at start", end>>20, base>>20)
	}
}

// waitGroupDone returns a channel closed when wg is done.
func waitGroupDone(wg *sync.WaitGroup) <-chan struct{} {
	c := make(chan struct{})
	go func() { wg.Wait(); close(c) }()
	return c
}
