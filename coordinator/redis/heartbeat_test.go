package redis

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/cbgrpc/cbgrpc/coordinator"
	"github.com/cbgrpc/cbgrpc/internal/faultproxy"
	"github.com/cbgrpc/cbgrpc/internal/redistest"
)

// lossBound is how soon a silent feed must be reported lost
// (docs/architecture.md, "When the coordinator fails", rule 7).
const lossBound = 2 * time.Second

// loss is when and how a Watch's Next failed.
type loss struct {
	at  time.Time
	err error
}

// lose reads w in the background until Next fails.
func lose(ctx context.Context, w coordinator.Watch) <-chan loss {
	lost := make(chan loss, 1)
	go func() {
		for {
			if _, err := w.Next(ctx); err != nil {
				lost <- loss{time.Now(), err}
				return
			}
		}
	}()
	return lost
}

// lostWithin checks that the feed was reported lost within lossBound of
// the fault, and logs how long it took and why.
func lostWithin(t *testing.T, l loss, fault time.Time) {
	t.Helper()
	if !errors.Is(l.err, coordinator.ErrFeedLost) {
		t.Fatalf("Next: %v; want ErrFeedLost", l.err)
	}
	took := l.at.Sub(fault)
	t.Logf("feed reported lost %v after the fault: %v", took.Round(time.Millisecond), l.err)
	if took > lossBound {
		t.Errorf("feed reported lost %v after the fault; want within %v", took, lossBound)
	}
}

// promoted reports when srv, a replica, becomes a master.
func promoted(t *testing.T, srv *redistest.Server) <-chan time.Time {
	rdb := goredis.NewClient(&goredis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	at := make(chan time.Time, 1)
	ended := make(chan struct{})
	t.Cleanup(func() { cancel(); <-ended; rdb.Close() })
	go func() {
		defer close(ended)
		for ctx.Err() == nil {
			role, err := rdb.Do(ctx, "ROLE").Slice()
			if err == nil && role[0] == "master" {
				at <- time.Now()
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()
	return at
}

// probe waits for scope's open period to end and returns the transition
// of the probe that half-opens it.
func probe(t *testing.T, c *Coordinator, scope string) coordinator.Transition {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		d, err := c.Admit(context.Background(), coordinator.AdmitRequest{Scope: scope, Policy: watchPolicy, Claim: "probe"})
		if err == nil && d.Transition != nil && d.Transition.To == coordinator.StateHalfOpen {
			return *d.Transition
		}
		if time.Now().After(deadline) {
			t.Fatalf("Admit of %q after its open period = %+v, %v; want a probe", scope, d, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// heard opens a Watch of c following scope, checks that it hears the
// scope trip, and waits for its heartbeats.
func heard(t *testing.T, ctx context.Context, c *Coordinator, scope string) coordinator.Watch {
	t.Helper()
	w := follow(t, ctx, c, scope)
	next(t, ctx, w, trip(t, c, scope))
	beating(t, w)
	return w
}

// refollow opens Watches of c following scopes, as a Breaker does after
// a lost feed, until one lasts: after a slot moved, go-redis may still
// subscribe on the node that served it, which answers MOVED and so ends
// the Watch.
func refollow(t *testing.T, ctx context.Context, c *Coordinator, scopes ...string) coordinator.Watch {
	t.Helper()
	start := time.Now()
	for {
		w, err := c.Watch(ctx)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { w.Close() })
		err = w.Follow(ctx, scopes...)
		if err == nil {
			t.Logf("a new Watch follows %q %v after the loss", scopes, time.Since(start).Round(time.Millisecond))
			return w
		}
		if time.Since(start) > 10*time.Second {
			t.Fatalf("Follow: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// beating waits until every subscription of w publishes heartbeats, and
// returns their shared channels.
func beating(t *testing.T, w coordinator.Watch) []string {
	t.Helper()
	ww := w.(*watch)
	deadline := time.Now().Add(5 * time.Second)
	for {
		ww.mu.Lock()
		var channels []string
		for _, s := range ww.subs {
			if s.beating {
				channels = append(channels, s.shared)
			}
		}
		all := len(channels) == len(ww.subs)
		ww.mu.Unlock()
		if all && len(channels) > 0 {
			return channels
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d subscriptions publish heartbeats", len(channels), len(ww.subs))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A proxy that stops forwarding keeps the TCP connections up: only the
// missing heartbeats tell.
func TestWatchLostWhenProxyStopsForwarding(t *testing.T) {
	t.Parallel()
	l, blocked := lostWhenProxyStops(t)
	lostWithin(t, l, blocked)
}

// WithHeartbeat sets the period, and so the silence bound: with a 250ms
// heartbeat, a proxy that stops forwarding is reported within 750ms and a
// bit, before the default 1.5 s. (At 100 ms, a loaded machine's scheduler
// alone overran the 300 ms bound before the proxy stopped.)
func TestWithHeartbeatSetsTheSilenceBound(t *testing.T) {
	t.Parallel()
	l, blocked := lostWhenProxyStops(t, WithHeartbeat(250*time.Millisecond))
	took := l.at.Sub(blocked)
	t.Logf("feed reported lost %v after the proxy stopped, with a 250ms heartbeat: %v", took.Round(time.Millisecond), l.err)
	if !errors.Is(l.err, coordinator.ErrFeedLost) || took >= 1500*time.Millisecond {
		t.Errorf("lost %v after the fault: %v; want ErrFeedLost before the default bound, 1.5s (three 250ms periods and slack)", took, l.err)
	}
	srv := redistest.Start(t)
	for _, bad := range []time.Duration{time.Millisecond, -time.Second} {
		func() {
			defer func() {
				if r := recover(); r == nil || !strings.Contains(fmt.Sprint(r), "WithHeartbeat") {
					t.Errorf("WithHeartbeat(%v): panic %v; want one naming the option", bad, r)
				}
			}()
			New(srv.Client(t), WithHeartbeat(bad))
		}()
	}
}

// lostWhenProxyStops follows a scope through a proxy to a redis-server,
// makes the proxy stop forwarding, and returns how the Watch reported the
// loss and when the proxy stopped.
func lostWhenProxyStops(t *testing.T, opts ...Option) (loss, time.Time) {
	t.Helper()
	srv := redistest.Start(t)
	proxy, err := faultproxy.Start(srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { proxy.Close() })
	// Unblocked before the Watch closes, so that Close need not wait for
	// the heartbeat in flight.
	defer proxy.Unblock()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := New(goredis.NewClient(&goredis.Options{Addr: proxy.Addr()}), opts...)
	t.Cleanup(func() { c.client.Close() })
	w := heard(t, ctx, c, "s")

	lost := lose(ctx, w)
	proxy.Block()
	blocked := time.Now()
	return <-lost, blocked
}

// After a Sentinel failover the failover client sends its commands to the
// new master, while the Watch's connection stays on the demoted one.
func TestWatchLostOnSentinelFailover(t *testing.T) {
	t.Parallel()
	s := redistest.StartSentinel(t)
	testFailover(t, New(s.FailoverClient(t)), s.Replica(), func() { s.Failover(t) })
}

// After a Cluster failover the slot of a followed scope is served by the
// former replica, while the Watch's connection stays on the demoted
// master.
func TestWatchLostOnClusterFailover(t *testing.T) {
	t.Parallel()
	cluster := redistest.StartClusterWithReplicas(t)
	c := New(cluster.Client(t))
	ch := scopeKeys(c.prefix, failoverScope)[keyChannel]
	testFailover(t, c, cluster.ReplicaOf(t, ch), func() { cluster.FailoverSlotOf(t, ch) })
}

// failoverScope is the scope followed through a failover.
const failoverScope = "s"

// testFailover follows failoverScope on c while failover promotes replica,
// checks that the feed is reported lost within lossBound of the
// promotion, and that a new Watch hears of the scope from the new master.
func testFailover(t *testing.T, c *Coordinator, replica *redistest.Server, failover func()) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	w := heard(t, ctx, c, failoverScope)
	switched := promoted(t, replica)
	lost := lose(ctx, w)
	failover()
	lostWithin(t, <-lost, <-switched)
	next(t, ctx, refollow(t, ctx, c, failoverScope), probe(t, c, failoverScope))
}

// A slot that moves to another node takes its channels' sharded
// subscriptions along: Redis 7 tells their subscribers with an
// unsubscription that the Watch did not ask for. Whether it is the slot of
// a followed scope or of the node's heartbeat channels. Where the Cluster
// lacks sharded pub/sub (Redis 6.2), PUBLISH reaches the subscribers of
// every node and a subscription stays where it is: the feed of a scope
// whose slot moved is whole and stays, hearing the transitions now
// published on the slot's new master; the heartbeats, which the new master
// counts no subscriber for, still tell the move of their own slot.
func TestWatchLostWhenSlotMoves(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		// key is a key or channel in the slot to move.
		key func(t *testing.T, c *Coordinator, w coordinator.Watch) string
		// keptByPublish: with PUBLISH the feed outlives the move.
		keptByPublish bool
	}{
		{"a scope's", func(_ *testing.T, c *Coordinator, _ coordinator.Watch) string {
			return scopeKeys(c.prefix, "s")[keyChannel]
		}, true},
		{"the heartbeats'", func(t *testing.T, _ *Coordinator, w coordinator.Watch) string {
			return beating(t, w)[0]
		}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cluster := redistest.StartCluster(t)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			cc := cluster.Client(t)
			c := New(cc)
			const scope = "s"
			w := follow(t, ctx, c, scope)
			beating(t, w)
			key := tc.key(t, c, w)
			srv, err := c.learn(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if tc.keptByPublish && !srv.sharded {
				moveSlot(t, ctx, cluster, cc, key)
				keptWhole(t, ctx, w, lossBound)
				next(t, ctx, w, trip(t, c, scope))
				return
			}
			lost := lose(ctx, w)
			moved := moveSlot(t, ctx, cluster, cc, key)
			lostWithin(t, <-lost, moved)
			next(t, ctx, refollow(t, ctx, c, scope), trip(t, c, scope))
		})
	}
}

// keptWhole checks that w, which nothing trips meanwhile, is not lost
// for d: its heartbeats keep coming.
func keptWhole(t *testing.T, ctx context.Context, w coordinator.Watch, d time.Duration) {
	t.Helper()
	quiet, stop := context.WithTimeout(ctx, d)
	defer stop()
	if tr, err := w.Next(quiet); !errors.Is(err, context.DeadlineExceeded) || ctx.Err() != nil {
		t.Fatalf("Next = %+v, %v; want nothing for %v", tr, err, d)
	}
}

// moveSlot moves the slot of key to another master, and returns when the
// last step, which the subscribers of its channels hear of, began.
func moveSlot(t *testing.T, ctx context.Context, cluster *redistest.Cluster, cc *goredis.ClusterClient, key string) time.Time {
	t.Helper()
	slot, err := cc.ClusterKeySlot(ctx, key).Result()
	if err != nil {
		t.Fatal(err)
	}
	from := cluster.MasterOf(t, key)
	to := cluster.Nodes[0]
	if to == from {
		to = cluster.Nodes[1]
	}
	id := func(srv *redistest.Server) string {
		id, err := srv.Client(t).Do(ctx, "CLUSTER", "MYID").Text()
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	setSlot := func(srv *redistest.Server, args ...any) {
		args = append([]any{"CLUSTER", "SETSLOT", slot}, args...)
		if err := srv.Client(t).Do(ctx, args...).Err(); err != nil {
			t.Fatalf("%v on %s: %v", args, srv.Addr(), err)
		}
	}
	fromID, toID := id(from), id(to)
	setSlot(to, "IMPORTING", fromID)
	setSlot(from, "MIGRATING", toID)
	setSlot(to, "NODE", toID)
	moved := time.Now()
	setSlot(from, "NODE", toID)
	return moved
}

// A healthy feed is not reported lost while nothing happens, nor while
// Next leaves a burst of transitions waiting, on a loaded machine (the
// tests of the package run in parallel, under -race).
func TestWatchHealthyFeedIsNotLost(t *testing.T) {
	t.Parallel()
	// Three silence bounds: a feed whose heartbeats stopped would be lost
	// twice over.
	idle := 3 * silencePeriods * heartbeatEvery
	t.Run("idle", func(t *testing.T) {
		t.Parallel()
		srv := redistest.Start(t)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		w := follow(t, ctx, New(srv.Client(t)), "s")
		// What the Watch hears, heard beside it.
		heartbeats := srv.Client(t).Subscribe(ctx, beating(t, w)...)
		defer heartbeats.Close()
		if _, err := heartbeats.Receive(ctx); err != nil {
			t.Fatal(err)
		}
		quiet, stop := context.WithTimeout(ctx, idle)
		defer stop()
		result := make(chan error, 1)
		go func() {
			tr, err := w.Next(quiet)
			if err == nil {
				err = fmt.Errorf("a transition: %+v", tr)
			}
			result <- err
		}()
		var gap time.Duration
		for last := time.Now(); ; {
			m, err := heartbeats.ReceiveTimeout(quiet, 0)
			if err != nil {
				break
			}
			if _, ok := m.(*goredis.Message); ok {
				gap = max(gap, time.Since(last))
				last = time.Now()
			}
		}
		if err := <-result; !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Next over %v of idleness: %v; want the deadline", idle, err)
		}
		t.Logf("largest gap between heartbeats over %v: %v", idle, gap.Round(time.Millisecond))
	})
	t.Run("slow reader", func(t *testing.T) {
		t.Parallel()
		srv := redistest.Start(t)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		c := New(srv.Client(t))
		w := follow(t, ctx, c)
		// More transitions than the Watch buffers: its reader waits for Next.
		scopes := make([]string, 2*cap(w.(*watch).msgs))
		for i := range scopes {
			scopes[i] = "s" + strconv.Itoa(i)
		}
		if err := w.Follow(ctx, scopes...); err != nil {
			t.Fatal(err)
		}
		want := make([]coordinator.Transition, len(scopes))
		for i, s := range scopes {
			want[i] = trip(t, c, s)
		}
		time.Sleep(idle)
		for _, tr := range want {
			next(t, ctx, w, tr)
		}
	})
}

// A server that forgot the scripts (a restart, SCRIPT FLUSH) still gets
// the heartbeats: the one that finds its script gone sends it along, and
// the feed lives on.
func TestHeartbeatAfterScriptFlush(t *testing.T) {
	t.Parallel()
	// Not shorter: at 20 ms the silence bound is 61 ms, and at 100 ms
	// 300 ms, both of which a loaded machine's scheduler alone exceeded.
	const period = 250 * time.Millisecond
	srv := redistest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := New(srv.Client(t), WithHeartbeat(period))
	w := follow(t, ctx, c, "s")
	beating(t, w)
	admin := srv.Client(t)
	flushes := 0
	// Every period for six silence bounds: a feed whose heartbeats failed
	// would be lost twice over.
	for end := time.Now().Add(6 * c.silence()); time.Now().Before(end); flushes++ {
		if err := admin.ScriptFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(period)
	}
	evals, _ := commandStats(t, admin, "eval")
	if evals == 0 {
		t.Fatalf("%d flushes and no EVAL: the heartbeats never found their script gone", flushes)
	}
	next(t, ctx, w, trip(t, c, "s"))
	t.Logf("%d flushes, %d heartbeats sent with their script", flushes, evals)
}
