package redis

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/cbgrpc/cbgrpc/coordinator"
	"github.com/cbgrpc/cbgrpc/coordinator/coordinatortest"
	"github.com/cbgrpc/cbgrpc/internal/faultproxy"
	"github.com/cbgrpc/cbgrpc/internal/redistest"
)

var watchPolicy = coordinator.Policy{
	Window: 10 * time.Second, Buckets: 10, ConsecutiveFailures: 1,
	OpenFor: time.Second, MaxOpenFor: 4 * time.Second, Probes: 1, ProbeLease: time.Second, ProbeSuccesses: 1,
}

// trip opens scope with one failure of its current generation and returns
// the transition.
func trip(t *testing.T, c *Coordinator, scope string) coordinator.Transition {
	t.Helper()
	ctx := context.Background()
	d, err := c.Admit(ctx, coordinator.AdmitRequest{Scope: scope, Policy: watchPolicy, Claim: "trip"})
	if err != nil {
		t.Fatal(err)
	}
	res, err := c.Record(ctx, coordinator.RecordRequest{Scope: scope, Policy: watchPolicy, Outcomes: []coordinator.Outcome{{Generation: d.Generation, Failure: true}}})
	if err != nil || res.Transition == nil || res.Transition.To != coordinator.StateOpen {
		t.Fatalf("tripping %q: %+v, %v", scope, res, err)
	}
	return *res.Transition
}

// follow opens a Watch of c following scopes, closed when the test ends.
func follow(t *testing.T, ctx context.Context, c *Coordinator, scopes ...string) coordinator.Watch {
	t.Helper()
	w, err := c.Watch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	if err := w.Follow(ctx, scopes...); err != nil {
		t.Fatalf("Follow: %v", err)
	}
	return w
}

// release puts scope back to closed and returns the transition.
func release(t *testing.T, c *Coordinator, scope string) coordinator.Transition {
	t.Helper()
	res, err := c.Release(context.Background(), coordinator.CommandRequest{Scope: scope, Policy: watchPolicy, Note: coordinator.Note{}})
	if err != nil || res.Transition == nil {
		t.Fatalf("releasing %q: %+v, %v", scope, res, err)
	}
	return *res.Transition
}

// next reads the next transition of w and checks it is want, field by
// field.
func next(t *testing.T, ctx context.Context, w coordinator.Watch, want coordinator.Transition) {
	t.Helper()
	got, err := w.Next(ctx)
	if err != nil {
		t.Fatalf("Next, waiting for %+v: %v", want, err)
	}
	if got.Scope != want.Scope || got.From != want.From || got.To != want.To || got.Generation != want.Generation ||
		!got.At.Equal(want.At) || got.Reason != want.Reason || !got.OpenUntil.Equal(want.OpenUntil) {
		t.Fatalf("Next = %+v; want %+v", got, want)
	}
}

// A replica following scopes on every node of a cluster hears of a trip
// that another replica, with its own client, makes on any of them.
func TestWatchFollowsScopesOnEveryClusterNode(t *testing.T) {
	cluster := redistest.StartCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	watcher := New(cluster.Client(t))
	tripper := New(cluster.Client(t))

	scopes := clusterScopes(t, cluster)
	w := follow(t, ctx, watcher, scopes...)
	if n := len(w.(*watch).subs); n != len(cluster.Nodes) {
		t.Errorf("%d sharded subscriptions for scopes on %d nodes", n, len(cluster.Nodes))
	}
	for _, scope := range scopes {
		next(t, ctx, w, trip(t, tripper, scope))
	}
}

// The feed carries when the open period ends, so that a replica that hears
// of a reopening knows its doubled period, and the end of an isolation for
// a set time; Result.RetryAfter says the same to the caller.
func TestWatchDeliversOpenUntil(t *testing.T) {
	srv := redistest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	clock := coordinatortest.NewClock()
	c := New(srv.Client(t), WithClock(clock.Now))
	const scope = "s"
	w := follow(t, ctx, c, scope)
	// What the script publishes, read as it is.
	raw := srv.Client(t).Subscribe(ctx, scopeKeys(DefaultPrefix, scope)[keyChannel])
	defer raw.Close()
	if _, err := raw.Receive(ctx); err != nil {
		t.Fatal(err)
	}

	tr := trip(t, c, scope)
	if want := tr.At.Add(watchPolicy.OpenFor); !tr.OpenUntil.Equal(want) {
		t.Fatalf("trip: OpenUntil %v; want %v", tr.OpenUntil, want)
	}
	next(t, ctx, w, tr)
	m, err := raw.ReceiveMessage(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf("0 1 %d %d %d consecutive failures 1 >= 1", tr.Generation, tr.At.UnixMilli(), tr.OpenUntil.UnixMilli()); m.Payload != want {
		t.Fatalf("published %q; want %q", m.Payload, want)
	}

	// A failed probe doubles the open period.
	clock.Set(tr.OpenUntil)
	d, err := c.Admit(ctx, coordinator.AdmitRequest{Scope: scope, Policy: watchPolicy, Claim: "probe"})
	if err != nil || d.Transition == nil {
		t.Fatalf("Admit after the open period = %+v, %v", d, err)
	}
	next(t, ctx, w, *d.Transition)
	res, err := c.Settle(ctx, coordinator.SettleRequest{Scope: scope, Policy: watchPolicy, Claim: "probe", Outcome: coordinator.Outcome{Generation: d.Generation, Failure: true}})
	if err != nil || res.Transition == nil {
		t.Fatalf("Settle of a failed probe = %+v, %v", res, err)
	}
	if want := 2 * watchPolicy.OpenFor; res.RetryAfter != want || !res.Transition.OpenUntil.Equal(clock.Now().Add(want)) {
		t.Fatalf("reopened: %+v, %+v; want RetryAfter and OpenUntil %v from now", res, *res.Transition, want)
	}
	next(t, ctx, w, *res.Transition)

	res, err = c.Isolate(ctx, coordinator.CommandRequest{Scope: scope, Policy: watchPolicy, Note: coordinator.Note{Reason: "test", For: time.Hour}})
	if err != nil || res.Transition == nil || res.RetryAfter != time.Hour || !res.Transition.OpenUntil.Equal(clock.Now().Add(time.Hour)) {
		t.Fatalf("Isolate for an hour = %+v, %v; want RetryAfter and OpenUntil an hour from now", res, err)
	}
	next(t, ctx, w, *res.Transition)
}

// Unfollow stops delivery at once (messages already on their way are
// dropped), unsubscribes, and closes a node's connection once it follows
// nothing more; following again works.
func TestWatchUnfollow(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	testUnfollow(t, New(rdb), New(srv.Client(t)), "a", "b", "c", func(ctx context.Context, ch string) (*goredis.Client, int64, error) {
		n, err := rdb.PubSubNumSub(ctx, ch).Result()
		return rdb, n[ch], err
	})
}

func TestWatchUnfollowOnCluster(t *testing.T) {
	cluster := redistest.StartCluster(t)
	cc := cluster.Client(t)
	ctx := context.Background()
	master := func(scope string) *goredis.Client {
		node, err := cc.MasterForKey(ctx, scopeKeys(DefaultPrefix, scope)[keyChannel])
		if err != nil {
			t.Fatal(err)
		}
		return node
	}
	// x and y on one node, z on another.
	var x, y, z string
	for i := 0; y == "" || z == ""; i++ {
		if i > 1000 {
			t.Fatal("no scopes found on two nodes")
		}
		s := fmt.Sprintf("svc-%d", i)
		switch {
		case x == "":
			x = s
		case master(s).Options().Addr == master(x).Options().Addr:
			if y == "" {
				y = s
			}
		case z == "":
			z = s
		}
	}
	watcher := New(cc)
	testUnfollow(t, watcher, New(cluster.Client(t)), x, y, z, func(ctx context.Context, ch string) (*goredis.Client, int64, error) {
		node, err := cc.MasterForKey(ctx, ch)
		if err != nil {
			return nil, 0, err
		}
		n, err := numsubLike(ctx, watcher, node, ch)
		return node, n[ch], err
	})
}

// testUnfollow follows x and y, which share a node, and z; numsub says
// how many subscribers a channel has on the node that owns it.
func testUnfollow(t *testing.T, watcher, tripper *Coordinator, x, y, z string, numsub func(context.Context, string) (*goredis.Client, int64, error)) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	w := follow(t, ctx, watcher)
	channel := func(scope string) string { return scopeKeys(watcher.prefix, scope)[keyChannel] }
	// subscribers polls until scope's channel has want subscribers.
	subscribers := func(scope string, want int64) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for {
			_, n, err := numsub(ctx, channel(scope))
			if err != nil {
				t.Fatal(err)
			}
			if n == want {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%q: %d subscribers; want %d", scope, n, want)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	if err := w.Follow(ctx, x, y, z); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{x, y, z} {
		subscribers(s, 1)
	}
	subs := len(w.(*watch).subs)

	// x's transition, published before y's on the same node, is dropped
	// whether it arrived before Unfollow or after.
	tx := trip(t, tripper, x)
	if err := w.Unfollow(ctx, x, "never followed"); err != nil {
		t.Fatal(err)
	}
	next(t, ctx, w, trip(t, tripper, y))
	subscribers(x, 0)
	subscribers(y, 1)
	if n := len(w.(*watch).subs); n != subs {
		t.Errorf("%d subscriptions after unfollowing one of two scopes on a node; want %d", n, subs)
	}

	if err := w.Unfollow(ctx, y, z); err != nil {
		t.Fatal(err)
	}
	if n := len(w.(*watch).subs); n != 0 {
		t.Errorf("%d subscriptions after unfollowing every scope; want 0", n)
	}
	for _, s := range []string{y, z} {
		subscribers(s, 0)
		node, _, err := numsub(ctx, channel(s))
		if err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(5 * time.Second)
		for {
			list, err := node.Do(ctx, "CLIENT", "LIST", "TYPE", "pubsub").Text()
			if err != nil {
				t.Fatal(err)
			}
			if strings.TrimSpace(list) == "" {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("pub/sub connections left on %s: %s", node.Options().Addr, list)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}

	// Following again after the connection was closed: y's release, made
	// first on the same node, is not delivered.
	if err := w.Follow(ctx, x); err != nil {
		t.Fatal(err)
	}
	release(t, tripper, y)
	if tr := release(t, tripper, x); tr.Generation <= tx.Generation {
		t.Fatalf("release of %q in generation %d, not above its trip's %d", x, tr.Generation, tx.Generation)
	} else {
		next(t, ctx, w, tr)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := w.Unfollow(ctx, x); err == nil {
		t.Error("Unfollow after Close: no error")
	}
}

// When the connection carrying the feed breaks, Next says the feed is lost
// rather than going quiet: what was published meanwhile is gone.
func TestWatchBrokenConnectionLosesTheFeed(t *testing.T) {
	srv := redistest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	w := follow(t, ctx, New(srv.Client(t)), "s")
	admin := srv.Client(t)
	if err := admin.ClientKillByFilter(ctx, "TYPE", "pubsub").Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Next(ctx); !errors.Is(err, coordinator.ErrFeedLost) {
		t.Fatalf("Next after the connection was killed: %v, want ErrFeedLost", err)
	}
	if err := w.Follow(ctx, "t"); err == nil {
		t.Error("Follow on a lost Watch succeeded")
	}
}

// Scopes are opaque on the feed too: braces, newlines and spaces in a
// scope reach the follower intact.
func TestWatchOpaqueScopes(t *testing.T) {
	srv := redistest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := New(srv.Client(t))
	scope := "a {b}\nc d|e \xff"
	w := follow(t, ctx, c, scope, "unrelated")
	tr := trip(t, c, scope)
	if tr.Reason != "consecutive failures 1 >= 1" {
		t.Fatalf("trip reason %q", tr.Reason)
	}
	next(t, ctx, w, tr)
}

// Close ends every goroutine of the Watch, even with a heartbeat stuck in
// a connection that stopped forwarding. Not parallel: it counts the
// package's goroutines.
func TestWatchCloseLeavesNoGoroutine(t *testing.T) {
	before := len(ours())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	cluster := redistest.StartCluster(t)
	w := follow(t, ctx, New(cluster.Client(t)), clusterScopes(t, cluster)...)
	beating(t, w)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}

	srv := redistest.Start(t)
	proxy, err := faultproxy.Start(srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { proxy.Close() })
	// Close waits for the heartbeat in flight, up to the read timeout.
	rdb := goredis.NewClient(&goredis.Options{Addr: proxy.Addr(), ReadTimeout: 2 * time.Second})
	t.Cleanup(func() { rdb.Close() })
	w = follow(t, ctx, New(rdb), "s")
	beating(t, w)
	proxy.Block()
	// A heartbeat is on its way, and stuck for a while yet.
	time.Sleep(heartbeatEvery + 100*time.Millisecond)
	start := time.Now()
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	t.Logf("Close with a heartbeat stuck took %v", time.Since(start).Round(time.Millisecond))

	// A moment for the goroutines that Close waited for to return, far
	// shorter than the heartbeat's read timeout.
	deadline := time.Now().Add(200 * time.Millisecond)
	for {
		left := ours()
		if len(left) <= before {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d goroutines left after Close, %d before:\n%s", len(left), before, strings.Join(left, "\n\n"))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// ours returns the stacks of the goroutines this package started.
func ours() []string {
	buf := make([]byte, 1<<20)
	var gs []string
	for g := range strings.SplitSeq(string(buf[:runtime.Stack(buf, true)]), "\n\n") {
		if strings.Contains(g, "\ncreated by github.com/cbgrpc/cbgrpc/coordinator/redis.") {
			gs = append(gs, g)
		}
	}
	return gs
}
