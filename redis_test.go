package cbgrpc

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sort"
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
	"github.com/cbgrpc/cbgrpc/internal/instant"
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
	breakers := make([]*Breaker, replicas)
	var wg sync.WaitGroup
	for i := range replicas {
		tracings[i] = newTracing()
		b := newBreaker(t, cbredis.New(srv.Client(t)), WithPolicy(p), WithTracerProvider(tracings[i].tp), WithRecordInterval(time.Millisecond))
		breakers[i] = b
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
	// A replica can hear of the trip on the feed before the tripping
	// Record's answer reaches its own replica: Close waits for that
	// round trip, and its span.
	for _, b := range breakers {
		b.Close()
	}
	spans := 0
	for _, tr := range tracings {
		spans += len(tr.transitions(coordinator.StateClosed, coordinator.StateOpen))
	}
	if spans != 1 {
		t.Errorf("%d closed -> open spans across %d replicas, want exactly 1", spans, replicas)
	}
}

// TestRedisMemoryBoundedByScopesInUse drives 100,000 distinct scopes
// through one Breaker over Redis, in ten waves of 10,000 with a 200ms
// window: after each wave, once a window has passed without calls, what
// the Breaker holds (its table, its feed's subscriptions on the server)
// comes down to nothing (but the fleet default's channel), and its heap does not grow from wave to wave.
// Memory is bounded by the scopes in use, not by every scope ever seen.
func TestRedisMemoryBoundedByScopesInUse(t *testing.T) {
	srv := redistest.Start(t)
	inspect := srv.Client(t)
	p := coordinator.DefaultPolicy()
	p.Window = 200 * time.Millisecond
	// Each wave waits until the coordinator has heard every outcome of it
	// (delivered), so that what is measured after it is what forgotten
	// scopes leave behind, not the Records still queued behind a fast
	// wave; nor can such a queue build up over the waves and hold Close
	// past its bound.
	rc := newTestCoordinator(t, cbredis.New(srv.Client(t)))
	rc.forgetful, rc.plainWatches = true, true
	mt := newMetrics()
	b := newBreaker(t, rc.likeRedis(), WithPolicy(p), WithMeterProvider(mt.mp))
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
		waves   = 10
		perWave = 10_000
		callers = 8
	)
	var peakTable, peakSubs int
	var heaps []uint64
	for wave := range waves {
		var (
			next atomic.Int64
			wg   sync.WaitGroup
		)
		for range callers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					i := next.Add(1)
					if i > perWave {
						return
					}
					tk, err := admitCall(b, ctx, &call{scope: fmt.Sprintf("scale/%d/%d", wave, i), method: testMethod})
					if err != nil {
						t.Errorf("wave %d, scope %d: %v", wave, i, err)
						return
					}
					b.finish(ctx, tk, nil)
				}
			}()
		}
		wg.Wait()
		peakTable, peakSubs = max(peakTable, b.known.size()), max(peakSubs, subscriptions())
		waitUntilDelivered(t, rc, mt, int64(wave+1)*perWave)
		// The feed keeps following the fleet default's policy channel,
		// with its two heartbeat channels: three subscriptions whatever
		// the scopes.
		eventually(t, "every scope of the wave to be forgotten and unfollowed", func() bool {
			return b.known.size() == 0 && subscriptions() <= 3
		})
		heaps = append(heaps, heap())
	}
	t.Logf("%d scopes in %d waves: at the end of a wave at most %d rows and %d subscriptions; no row and no scope subscription a window later; heap after each wave %v KiB",
		waves*perWave, waves, peakTable, peakSubs, kib(heaps))
	if peakTable > perWave {
		t.Errorf("the table held %d rows; want at most the %d scopes of one wave", peakTable, perWave)
	}
	// The first wave sizes what is kept for reuse (map buckets, pools).
	// After it, a leak grows the heap by what each scope left behind,
	// wave after wave; one reading can also catch a burst of garbage from
	// elsewhere in the process (single-wave spikes of 4 MiB were seen)
	// or a one-off step (a pool growing once). So the test takes the
	// trend of the waves after the first with the median of the slopes
	// between every two of them (Theil-Sen), which a spike or a step
	// moves little, and allows less than 100 bytes a scope: a forgotten
	// table row, subscription or timer costs more than that.
	slope := medianSlope(heaps[1:])
	t.Logf("heap trend after the first wave: %.0f bytes a wave, %.1f bytes a scope", slope, slope/perWave)
	if slope >= 100*perWave {
		t.Errorf("the heap grows by %.0f bytes a wave (%.1f bytes for each scope forgotten); want it flat", slope, slope/perWave)
	}
}

// waitUntilDelivered waits, up to a minute, until d's Records have
// delivered n outcomes, or the Breaker measured by mt dropped the rest
// (a Record a loaded machine timed out drops its outcomes, by design):
// what is still queued then is none. An outcome neither delivered nor
// dropped fails the test, naming the drops by reason.
func waitUntilDelivered(t *testing.T, d *testCoordinator, mt *metrics, n int64) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for d.delivered.Load()+mt.sum(t, "cbgrpc.outcomes.dropped") < n {
		if time.Now().After(deadline) {
			t.Fatalf("the Records delivered %d outcomes of %d within a minute (dropped: %s)", d.delivered.Load(), n, mt.drops(t))
		}
		time.Sleep(5 * time.Millisecond)
	}
	if dropped := mt.sum(t, "cbgrpc.outcomes.dropped"); dropped > 0 {
		t.Logf("%d outcomes dropped by the %dth delivered", dropped, n)
	}
}

// medianSlope is the median of the slopes between every two of ys, taken
// at x = 0, 1, 2...: a trend that outliers move little.
func medianSlope(ys []uint64) float64 {
	var slopes []float64
	for i := range ys {
		for j := i + 1; j < len(ys); j++ {
			slopes = append(slopes, (float64(ys[j])-float64(ys[i]))/float64(j-i))
		}
	}
	sort.Float64s(slopes)
	n := len(slopes)
	if n == 0 {
		return 0
	}
	if n%2 == 1 {
		return slopes[n/2]
	}
	return (slopes[n/2-1] + slopes[n/2]) / 2
}

func kib(bs []uint64) []uint64 {
	out := make([]uint64, len(bs))
	for i, b := range bs {
		out[i] = b >> 10
	}
	return out
}

// waitGroupDone returns a channel closed when wg is done.
func waitGroupDone(wg *sync.WaitGroup) <-chan struct{} {
	c := make(chan struct{})
	go func() { wg.Wait(); close(c) }()
	return c
}

// TestRedisRolledBackStartsAboveWhatTheBreakerSaw: Redis loses a trip it
// acknowledged (a failover to a replica the trip had not reached, played
// here by restoring the keys as they were before it). The Breaker tells
// the coordinator the generation it holds, so the coordinator starts the
// scope above it rather than hand out the rolled-back generation again,
// and the Breaker's table, which never lets an older generation override
// a newer one, takes the new answer and answers admissions again.
func TestRedisRolledBackStartsAboveWhatTheBreakerSaw(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	p := tripPolicy()
	p.OpenFor = 200 * time.Millisecond
	c := cbredis.New(rdb)
	b := newBreaker(t, c, WithPolicy(p), WithRecordInterval(time.Millisecond))
	svc := &service{}
	client := testgrpc.NewTestServiceClient(dial(t, serveTest(t, svc), b))
	ctx := context.Background()

	if _, err := client.EmptyCall(ctx, &testpb.Empty{}); err != nil {
		t.Fatal(err)
	}
	scopes := b.known.all()
	if len(scopes) != 1 {
		t.Fatalf("scopes in the table: %q; want one", scopes)
	}
	scope := scopes[0]
	before := snapshotOf(t, c, scope, p)
	saved := dumpAll(t, rdb)

	svc.setErr(status.Error(codes.Unavailable, "down"))
	eventually(t, "the breaker to open", func() bool {
		_, err := client.EmptyCall(ctx, &testpb.Empty{})
		return errors.Is(err, ErrOpen)
	})
	tripped := snapshotOf(t, c, scope, p)
	svc.setErr(nil)

	restoreAll(t, rdb, saved)
	if s := snapshotOf(t, c, scope, p); s.State != coordinator.StateClosed || s.Generation != before.Generation {
		t.Fatalf("after the rollback: %v in generation %d; want closed in %d, as before the trip", s.State, s.Generation, before.Generation)
	}
	eventually(t, "calls to go through again", func() bool {
		_, err := client.EmptyCall(ctx, &testpb.Empty{})
		return err == nil
	})
	after := snapshotOf(t, c, scope, p)
	known, _ := b.known.use(scope, instant.Now())
	t.Logf("generations: %d before the trip, %d tripped (lost), %d after the rollback; the table holds %v in %d",
		before.Generation, tripped.Generation, after.Generation, known.state, known.gen)
	if after.State != coordinator.StateClosed || after.Generation <= tripped.Generation {
		t.Errorf("after the rollback the coordinator hands out %v generation %d; want closed above the lost %d", after.State, after.Generation, tripped.Generation)
	}
	if known.state != coordinator.StateClosed || known.gen != after.Generation {
		t.Errorf("the table holds %v in generation %d; want closed in %d, what the coordinator says", known.state, known.gen, after.Generation)
	}
}

// TestRedisCorruptScopeDecidedAlone: junk in one scope's hashes that
// bends the scripts' replies (a generation past int64, a policy version
// that is no number) makes that scope's calls undecidable, and only
// those: fail-closed refuses them as corrupt, while a healthy scope's
// calls still go through the coordinator, with no back-off, call after
// call.
func TestRedisCorruptScopeDecidedAlone(t *testing.T) {
	for _, junk := range []struct {
		part  string
		field []any
	}{
		{"state", []any{"generation", "1e20"}},
		{"policy", []any{"version", "not a number"}},
	} {
		t.Run(junk.part, func(t *testing.T) {
			ctx := context.Background()
			rdb := redistest.Start(t).Client(t)
			b := newBreaker(t, cbredis.New(rdb), WithCoordinatorFailure(FailClosed), WithCoordinatorBackoff(time.Hour))
			svc := &service{}
			addr := serveTest(t, svc)
			client := testgrpc.NewTestServiceClient(dial(t, addr, b))
			bad := ScopeByMethod(ctx, addr, "/grpc.testing.TestService/EmptyCall")
			// Born by another replica: this Breaker knows nothing of it.
			if _, err := cbredis.New(rdb).Admit(ctx, coordinator.AdmitRequest{Scope: bad, Policy: coordinator.DefaultPolicy(), Claim: "born"}); err != nil {
				t.Fatal(err)
			}
			if err := rdb.HSet(ctx, redistest.ScopeKey(cbredis.DefaultPrefix, bad, junk.part), junk.field...).Err(); err != nil {
				t.Fatal(err)
			}
			for i := range 3 {
				_, err := client.EmptyCall(ctx, &testpb.Empty{})
				if !errors.Is(err, ErrOpen) || !errors.Is(err, coordinator.ErrCorruptState) {
					t.Errorf("call %d of the corrupt scope, fail-closed: %v; want a rejection as corrupt", i, err)
				}
				if b.health.InBackoff() || !b.health.Trusted() {
					t.Errorf("call %d of the corrupt scope put the coordinator's health in back-off", i)
				}
				if _, err := client.UnaryCall(ctx, &testpb.SimpleRequest{}); err != nil {
					t.Errorf("call %d of a healthy scope beside the corrupt one: %v", i, err)
				}
			}
			if got := svc.calls.Load(); got != 3 {
				t.Errorf("the server had %d calls, want the healthy scope's 3", got)
			}
		})
	}
}

func snapshotOf(t *testing.T, c coordinator.Coordinator, scope string, p coordinator.Policy) coordinator.Snapshot {
	t.Helper()
	s, err := c.Snapshot(context.Background(), scope, p)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// dumpAll saves every key of rdb's database, for restoreAll.
func dumpAll(t *testing.T, rdb *goredis.Client) map[string]string {
	t.Helper()
	ctx := context.Background()
	keys, err := rdb.Keys(ctx, "*").Result()
	if err != nil || len(keys) == 0 {
		t.Fatalf("KEYS *: %q, %v; want the scope's keys", keys, err)
	}
	saved := make(map[string]string, len(keys))
	for _, k := range keys {
		if saved[k], err = rdb.Dump(ctx, k).Result(); err != nil {
			t.Fatalf("DUMP %s: %v", k, err)
		}
	}
	return saved
}

// restoreAll brings rdb's database back to what dumpAll saved, as a
// failover to a replica that had not received the writes since would.
func restoreAll(t *testing.T, rdb *goredis.Client, saved map[string]string) {
	t.Helper()
	ctx := context.Background()
	if err := rdb.FlushDB(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	for k, v := range saved {
		if err := rdb.Restore(ctx, k, 0, v).Err(); err != nil {
			t.Fatalf("RESTORE %s: %v", k, err)
		}
	}
}

// TestRedisForeignMessageKeepsTheFeed: a message on a scope's channel that
// no coordinator published (anyone with PUBLISH can send one) does not
// end the Breaker's feed: no loss counted, the scope stays followed, and a
// trip published after it still reaches the table.
func TestRedisForeignMessageKeepsTheFeed(t *testing.T) {
	srv := redistest.Start(t)
	m := newMetrics()
	coord := cbredis.New(srv.Client(t))
	b := newBreaker(t, coord, WithPolicy(tripPolicy()), WithMeterProvider(m.mp))
	other := newBreaker(t, cbredis.New(srv.Client(t)), WithPolicy(tripPolicy()), WithAdmissionCache(0))
	const scope = "feed/foreign"
	admitN(t, b, scope, 1)
	eventually(t, "the feed follows the scope", func() bool { return followed(b, scope) })

	ctx := context.Background()
	admin := srv.Client(t)
	channels, err := admin.PubSubChannels(ctx, "*:transitions").Result()
	if err != nil || len(channels) != 1 {
		t.Fatalf("PUBSUB CHANNELS: %q, %v; want the scope's channel", channels, err)
	}
	if err := admin.Publish(ctx, channels[0], "\x9b2J not a transition").Err(); err != nil {
		t.Fatal(err)
	}
	tk, err := admitCall(other, ctx, &call{scope: scope, method: testMethod})
	if err != nil {
		t.Fatal(err)
	}
	other.finish(ctx, tk, errTransport)
	eventually(t, "the trip reaches the table", func() bool {
		e, ok := cached(b, scope)
		return ok && e.state == coordinator.StateOpen
	})
	if n := m.sum(t, "cbgrpc.feed.losses"); n != 0 {
		t.Errorf("cbgrpc.feed.losses = %d after a foreign message; want 0", n)
	}
	if n := coord.IgnoredMessages(); n != 1 {
		t.Errorf("IgnoredMessages() = %d; want 1", n)
	}
}
