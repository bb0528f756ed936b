package redis

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/cbgrpc/cbgrpc/coordinator"
	"github.com/cbgrpc/cbgrpc/internal/redistest"
)

// A Watch publishes on the shared channel unless another's heartbeat
// came there within the last period and a half; of two that published at
// once, the one with the greater id yields.
func TestSharedHeartbeatTurns(t *testing.T) {
	const period = 500 * time.Millisecond
	now := time.Now()
	recently, late, long := now.Add(-period/2), now.Add(-period*5/4), now.Add(-2*period)
	for _, tc := range []struct {
		name           string
		sharing        bool
		other, smaller time.Time
		want           bool
	}{
		{name: "heard none: it beats", want: true},
		{name: "heard none for two periods: it takes over", other: long, smaller: long, want: true},
		{name: "heard another: it listens", other: recently, want: false},
		{name: "heard another a little late: no silence, it listens", other: late, smaller: late, want: false},
		{name: "beating, heard a smaller id a little late: it yields", sharing: true, other: late, smaller: late, want: false},
		{name: "heard a smaller id: it listens", other: recently, smaller: recently, want: false},
		{name: "beating, heard no other: it goes on", sharing: true, want: true},
		{name: "beating, heard a greater id: it goes on", sharing: true, other: recently, smaller: long, want: true},
		{name: "beating, heard a smaller id: it yields", sharing: true, other: recently, smaller: recently, want: false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &sub{sharing: tc.sharing, other: tc.other, smaller: tc.smaller}
			if got := s.shares(now, period); got != tc.want {
				t.Errorf("shares = %v; want %v", got, tc.want)
			}
			if s.sharing != tc.want {
				t.Errorf("sharing = %v after shares returned %v", s.sharing, tc.want)
			}
		})
	}
}

// Watches share one heartbeat a period between them, and publish no
// other: a hot scope's master runs about a heartbeat a period, not one
// per replica. They share whatever scopes they follow: on a single server
// every Watch, on a Cluster every Watch subscribed to the node. Each
// heartbeat carries the node's replication ID.
func TestWatchesShareOneHeartbeat(t *testing.T) {
	t.Parallel()
	t.Run("server", func(t *testing.T) {
		t.Parallel()
		srv := redistest.Start(t)
		shareOneHeartbeat(t, func() goredis.UniversalClient { return srv.Client(t) }, func(i int) string { return "s" + strconv.Itoa(i) })
	})
	t.Run("cluster", func(t *testing.T) {
		t.Parallel()
		cluster := redistest.StartCluster(t)
		// Scopes of one node, each its own.
		cc := cluster.Client(t)
		nodeOf := func(scope string) string {
			m, err := cc.MasterForKey(context.Background(), scopeKeys(DefaultPrefix, scope)[keyChannel])
			if err != nil {
				t.Fatal(err)
			}
			return m.Options().Addr
		}
		var scopes []string
		for i := 0; len(scopes) < 8; i++ {
			if s := "s" + strconv.Itoa(i); nodeOf(s) == nodeOf("s0") {
				scopes = append(scopes, s)
			}
		}
		shareOneHeartbeat(t, func() goredis.UniversalClient { return cluster.Client(t) }, func(i int) string { return scopes[i] })
	})
}

// shareOneHeartbeat has Watches, each of its own client, follow scope(i),
// and counts what they publish, on their shared channel and in all.
func shareOneHeartbeat(t *testing.T, client func() goredis.UniversalClient, scope func(i int) string) {
	const (
		watches = 8
		period  = 100 * time.Millisecond
		span    = 30 * period
	)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	shared := ""
	var c *Coordinator
	for i := range watches {
		c = New(client(), WithHeartbeat(period))
		w := follow(t, ctx, c, scope(i))
		beats := beating(t, w)
		if shared != "" && beats[0] != shared {
			t.Fatalf("Watches on channels %q and %q; want one", shared, beats[0])
		}
		shared = beats[0]
	}
	// What the Watches publish, heard beside them.
	rdb := client()
	replid := ""
	heartbeats := subscribeLike(t, ctx, c, rdb, shared)
	if cc, ok := rdb.(*goredis.ClusterClient); ok {
		node, err := cc.MasterForKey(ctx, shared)
		if err != nil {
			t.Fatal(err)
		}
		replid = infoReplid(t, ctx, node)
	} else {
		replid = infoReplid(t, ctx, rdb.(*goredis.Client))
	}
	defer heartbeats.Close()
	if _, err := heartbeats.Receive(ctx); err != nil {
		t.Fatal(err)
	}
	counted, stop := context.WithTimeout(ctx, span)
	defer stop()
	sharedBeats := 0
	publishers := map[string]int{}
	for {
		m, err := heartbeats.ReceiveTimeout(counted, 0)
		if err != nil {
			break
		}
		if msg, ok := m.(*goredis.Message); ok {
			sharedBeats++
			f := strings.Fields(msg.Payload)
			publishers[f[0]]++
			if len(f) < 2 || f[1] != replid {
				t.Errorf("heartbeat %q; want the id, the node's replication ID %s, and maybe a count", msg.Payload, replid)
			}
		}
	}
	periods := int(span / period)
	t.Logf("over %d periods, %d Watches: %d shared heartbeats (by %d of them)", periods, watches, sharedBeats, len(publishers))
	// Each Watch alone would publish watches*periods.
	if sharedBeats < periods/2 || sharedBeats > 2*periods {
		t.Errorf("%d shared heartbeats over %d periods; want about one a period", sharedBeats, periods)
	}
}

// infoReplid reads the replication ID of the node of c.
func infoReplid(t *testing.T, ctx context.Context, c *goredis.Client) string {
	t.Helper()
	info, err := c.InfoMap(ctx, "replication").Result()
	if err != nil {
		t.Fatal(err)
	}
	return info["Replication"]["master_replid"]
}

// A replica whose subscription stayed on the demoted master is told by
// the replication ID its heartbeats carry, even when another replica
// already follows the shared channel on the new master, so that its
// heartbeats reach a subscriber there: the demoted master, once it
// follows the new one, relays what the new master publishes, and the
// Watch's own heartbeats go to the new master once its client follows
// the failover.
func TestWatchLostOnFailoverWhereOthersFollow(t *testing.T) {
	t.Parallel()
	s := redistest.StartSentinel(t)
	c := New(s.FailoverClient(t))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	w := heard(t, ctx, c, failoverScope)
	master := s.Replica() // once promoted
	switched := promoted(t, master)
	lost := lose(ctx, w)
	// Another replica's subscription on the new master, made as soon as it
	// is master (the Sentinel's promotion closes the subscriptions it had),
	// long before the Sentinel announces it and the client follows.
	shared, err := c.heartbeatBase(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	other := make(chan *goredis.PubSub, 1)
	promotion := make(chan time.Time, 1)
	go func() {
		at := <-switched
		ps := master.Client(t).Subscribe(ctx, shared)
		if _, err := ps.Receive(ctx); err != nil {
			t.Error(err)
		}
		t.Logf("another subscription on the new master %v after its promotion", time.Since(at).Round(time.Millisecond))
		promotion <- at
		other <- ps
	}()
	s.Failover(t)
	l, at := <-lost, <-promotion
	defer (<-other).Close()
	if !strings.Contains(l.err.Error(), "replication ID") {
		t.Errorf("lost by another sign than the replication ID: %v", l.err)
	}
	// The Sentinel announces the new master up to 1.3 s after the
	// promotion (see testFailover); the Watch publishes there within a
	// period after, and hears within the silence bound.
	took := l.at.Sub(at)
	t.Logf("feed reported lost %v after the promotion: %v", took.Round(time.Millisecond), l.err)
	if bound := 1300*time.Millisecond + c.silence() + 500*time.Millisecond; took > bound {
		t.Errorf("feed reported lost %v after the promotion; want within %v", took, bound)
	}
	next(t, ctx, refollow(t, ctx, c, failoverScope), probe(t, c, failoverScope))
}

// When the Watch that publishes the shared heartbeat goes, another takes
// over before the silence bound: the Watches that listened lose nothing.
func TestSharedHeartbeatOutlivesItsPublisher(t *testing.T) {
	t.Parallel()
	const period = 100 * time.Millisecond
	srv := redistest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	watches := map[string]coordinator.Watch{}
	var shared string
	for i := range 3 {
		w := follow(t, ctx, New(srv.Client(t), WithHeartbeat(period)), "s"+strconv.Itoa(i))
		watches[w.(*watch).id] = w
		shared = beating(t, w)[0]
	}
	heartbeats := srv.Client(t).Subscribe(ctx, shared)
	defer heartbeats.Close()
	// publisher waits for two shared heartbeats in a row from one Watch,
	// passing over those of Watch late that come first: sent before it
	// closed, they may still be on their way.
	publisher := func(late string) string {
		last := ""
		for {
			m, err := heartbeats.ReceiveTimeout(ctx, 0)
			if err != nil {
				t.Fatal(err)
			}
			if msg, ok := m.(*goredis.Message); ok {
				id, _, _ := strings.Cut(msg.Payload, " ")
				switch {
				case last == "" && id == late:
				case id == last:
					return last
				default:
					last = id
				}
			}
		}
	}
	gone := publisher("")
	if err := watches[gone].Close(); err != nil {
		t.Fatal(err)
	}
	delete(watches, gone)
	closed := time.Now()
	next := publisher(gone)
	t.Logf("the shared heartbeat came from another Watch %v after its publisher closed", time.Since(closed).Round(time.Millisecond))
	if _, ok := watches[next]; !ok {
		t.Fatalf("the shared heartbeat comes from %q, not from a Watch still open", next)
	}
	// Three silence bounds: a feed left without heartbeats would be lost.
	quiet, stop := context.WithTimeout(ctx, 3*3*period)
	defer stop()
	for id, w := range watches {
		if tr, err := w.Next(quiet); !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Watch %s after the publisher closed: Next = %+v, %v; want nothing until the deadline", id, tr, err)
		}
	}
}

// A shared channel splits by level while a heartbeat reaches more than
// the cap, and merges back once it reaches under a quarter of it.
func TestSharedChannelLevel(t *testing.T) {
	for _, tc := range []struct{ followers, at, limit, want int }{
		{followers: 1, at: 0, limit: 1000, want: 0},
		{followers: 1000, at: 0, limit: 1000, want: 0},
		{followers: 1001, at: 0, limit: 1000, want: 1},
		{followers: 10000, at: 0, limit: 1000, want: 4}, // 16 channels of 625
		{followers: 1500, at: 3, limit: 1000, want: 4},
		{followers: 250, at: 2, limit: 1000, want: 2},
		{followers: 249, at: 2, limit: 1000, want: 1},
		{followers: 1, at: 0, limit: 8, want: 0},
	} {
		if got := level(tc.followers, tc.at, tc.limit); got != tc.want {
			t.Errorf("level(%d followers at %d, limit %d) = %d; want %d", tc.followers, tc.at, tc.limit, got, tc.want)
		}
	}
	// Level L has 2^L channels, and ids spread over them.
	seen := map[string]bool{}
	for i := range 64 {
		ch := sharedChannel("b", 2, strconv.Itoa(i))
		if !strings.HasPrefix(ch, "b:2.") {
			t.Fatalf("sharedChannel at level 2 = %q", ch)
		}
		seen[ch] = true
	}
	if len(seen) != 4 || sharedChannel("b", 0, "x") != "b" {
		t.Errorf("64 ids at level 2 took %d channels (%v); want 4", len(seen), seen)
	}
}

// Watches on a shared channel with more followers than the cap split it
// into channels of at most the cap, and come back together once most of
// them have gone, with no feed lost on the way.
func TestSharedChannelSplitsAndMerges(t *testing.T) {
	t.Parallel()
	t.Run("server", func(t *testing.T) {
		t.Parallel()
		srv := redistest.Start(t)
		inspect := srv.Client(t)
		splitsAndMerges(t, func() goredis.UniversalClient { return srv.Client(t) }, func(i int) string { return "s" + strconv.Itoa(i) },
			func(ctx context.Context, channels ...string) (map[string]int64, error) {
				return inspect.PubSubNumSub(ctx, channels...).Result()
			})
	})
	t.Run("cluster", func(t *testing.T) {
		t.Parallel()
		cluster := redistest.StartCluster(t)
		const scope = "hot"
		// Every channel is in the scope's slot.
		inspect := cluster.MasterOf(t, scopeKeys(DefaultPrefix, scope)[keyChannel]).Client(t)
		c := New(cluster.Client(t))
		splitsAndMerges(t, func() goredis.UniversalClient { return cluster.Client(t) }, func(int) string { return scope },
			func(ctx context.Context, channels ...string) (map[string]int64, error) {
				return numsubLike(ctx, c, inspect, channels...)
			})
	})
}

// splitsAndMerges has Watches of their own clients follow scope(i), and
// counts the followers of their shared channels with numsub.
func splitsAndMerges(t *testing.T, client func() goredis.UniversalClient, scope func(i int) string,
	numsub func(context.Context, ...string) (map[string]int64, error)) {
	const (
		// Not shorter: a feed is lost after three silent periods, and on
		// a loaded host with -race a three-node Cluster has gone 300 ms
		// without a heartbeat reaching a follower, which is not what this
		// test is about.
		period = 250 * time.Millisecond
		limit  = 8
	)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var watches []*watch
	for i := range 2 * limit {
		c := New(client(), WithHeartbeat(period))
		c.sharedCap = limit
		w := follow(t, ctx, c, scope(i)).(*watch)
		beating(t, w)
		watches = append(watches, w)
	}
	// channels returns the shared channels of ws, with how many follow each.
	channels := func(ws []*watch) map[string]int64 {
		var names []string
		for _, w := range ws {
			w.mu.Lock()
			for _, s := range w.subs {
				names = append(names, s.shared)
			}
			w.mu.Unlock()
		}
		n, err := numsub(ctx, names...)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	settled := func(what string, ws []*watch, ok func(map[string]int64) bool) map[string]int64 {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for {
			n := channels(ws)
			if ok(n) {
				t.Logf("%s: %v", what, n)
				return n
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: not within 20 s: %v", what, n)
			}
			time.Sleep(period)
		}
	}
	settled("split to at most the cap a channel", watches, func(n map[string]int64) bool {
		for _, f := range n {
			if f > limit {
				return false
			}
		}
		return len(n) > 1
	})
	// Two Watches on different channels stay; the others go.
	left := []*watch{watches[0]}
	for _, w := range watches[1:] {
		if len(left) == 1 && len(channels([]*watch{left[0], w})) == 2 {
			left = append(left, w)
			continue
		}
		w.Close()
	}
	if len(left) != 2 {
		t.Fatal("every Watch on one channel after the split")
	}
	settled("the two left share one channel again", left, func(n map[string]int64) bool {
		for _, f := range n {
			return len(n) == 1 && f == 2
		}
		return false
	})
	// No feed was lost on the way, nor is for three silence bounds more.
	quiet, stop := context.WithTimeout(ctx, 9*period)
	defer stop()
	for _, w := range left {
		if tr, err := w.Next(quiet); !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Next = %+v, %v; want nothing until the deadline", tr, err)
		}
	}
}

// The replies to a Watch's heartbeats and censuses say which master's
// stream its subscription hears, the first of them, and another is a lost
// feed; so is a reply that counts no subscriber. A heartbeat heard is a
// hint: one of another stream, or before any reply, puts the subscription
// in doubt and is not heard, nor is a message no Watch sends; a count
// that calls for another level puts it in doubt too. Only heartbeats of
// the stream are other Watches' turns.
func TestHeartbeatLineage(t *testing.T) {
	const (
		a = "0123456789abcdef0123456789abcdef01234567"
		b = "fedcba9876543210fedcba9876543210fedcba98"
	)
	type step struct {
		payload string // heard, or else the reply to a heartbeat or census
		reached int64
		replid  string
		lost    string // in the error, or none
		// heard: the message counts as a heartbeat; doubt: the
		// subscription is in doubt after the step; turn: another
		// Watch's turn was heard.
		heard, doubt, turn bool
	}
	for _, tc := range []struct {
		name  string
		steps []step
	}{
		{"one stream", []step{{reached: 3, replid: a}, {payload: "X " + a, heard: true, turn: true}, {payload: "Y " + a + " 2", heard: true, turn: true}, {reached: 3, replid: a, turn: true}}},
		{"heard before any reply", []step{{payload: "X " + a, doubt: true}, {reached: 2, replid: a}, {payload: "X " + a, heard: true, turn: true}}},
		{"heard another, a forgery", []step{{reached: 3, replid: a}, {payload: "Y " + b, doubt: true}, {reached: 3, replid: a}}},
		{"heard another, a failover", []step{{reached: 3, replid: a}, {payload: "Y " + b, doubt: true}, {reached: 3, replid: b, lost: "another master's replication ID", doubt: true}}},
		{"published to another", []step{{reached: 3, replid: a}, {reached: 3, replid: b, lost: "another master's replication ID"}}},
		{"reached nobody", []step{{reached: 0, replid: a, lost: "no subscriber"}}},
		{"its own id, another stream", []step{{reached: 1, replid: a}, {payload: "W " + b, doubt: true}}},
		{"its own id", []step{{reached: 1, replid: a}, {payload: "W " + a, heard: true}}},
		{"a count that calls for another level", []step{{reached: 3, replid: a}, {payload: "Y " + a + " 5000", heard: true, turn: true, doubt: true}}},
		{"junk", []step{{reached: 3, replid: a}, {payload: "X"}, {payload: "X 12"}, {payload: ""}, {payload: " " + a}, {payload: "X " + strings.ToUpper(a)}}},
		{"a server without replication ID", []step{{reached: 2, replid: "-"}, {payload: "Y - 2", heard: true, turn: true}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := &watch{id: "W", c: &Coordinator{sharedCap: sharedCap}}
			s := &sub{}
			for i, st := range tc.steps {
				var err error
				if st.payload != "" || st.replid == "" {
					if heard := w.heardShared(s, st.payload, time.Now()); heard != st.heard {
						t.Fatalf("step %d: heard %q = %v; want %v", i, st.payload, heard, st.heard)
					}
				} else {
					if err = s.lineage(st.reached, st.replid); err == nil {
						s.doubt = false
					}
				}
				switch {
				case st.lost == "" && err != nil:
					t.Fatalf("step %d: %v; want none", i, err)
				case st.lost != "" && (err == nil || !errors.Is(err, coordinator.ErrFeedLost) || !strings.Contains(err.Error(), st.lost)):
					t.Fatalf("step %d: %v; want a lost feed, %q", i, err, st.lost)
				}
				if s.doubt != st.doubt {
					t.Fatalf("step %d: in doubt %v; want %v", i, s.doubt, st.doubt)
				}
				if turn := !s.other.IsZero(); turn != st.turn {
					t.Fatalf("step %d: another's turn heard %v; want %v", i, turn, st.turn)
				}
			}
		})
	}
	for f, want := range map[string]bool{a: true, "-": true, "12": false, "": false, a[:39]: false, strings.ToUpper(a): false} {
		if isReplid(f) != want {
			t.Errorf("isReplid(%q) = %v", f, !want)
		}
	}
}

// Anyone who may publish on the shared heartbeat channel can send
// anything there: heartbeats of another replication ID (its own Watches'
// id among them), counts that would split the channel, junk. None of it
// ends a feed or moves a Watch: each checks what it doubts with a census
// of its own. The feeds still carry transitions afterwards.
func TestForgedHeartbeatsEndNoFeed(t *testing.T) {
	t.Parallel()
	const (
		watches = 4
		// 100 ms gave a 302 ms silence bound and 200 ms a 602 ms one,
		// both of which a loaded machine's scheduler alone overran.
		period  = 300 * time.Millisecond
		forging = 21 * period // seven silence bounds
	)
	srv := redistest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var ws []*watch
	var c *Coordinator
	for range watches {
		c = New(srv.Client(t), WithHeartbeat(period))
		w := follow(t, ctx, c, "forged").(*watch)
		beating(t, w)
		ws = append(ws, w)
	}
	shared, err := c.heartbeatBase(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	forger := srv.Client(t)
	real := infoReplid(t, ctx, forger)
	other := strings.Repeat("ab", 20)
	forged := []string{
		"X " + other,                   // another stream
		ws[0].id + " " + other,         // a Watch's own id, another stream
		"0 " + other + " 1000000",      // another stream, a count that would split
		"0 " + real + " 1000000",       // this stream, a count that would split
		"junk", "X 12", "", " " + real, // no heartbeat at all
	}
	start := time.Now()
	for sent := 0; time.Since(start) < forging; sent++ {
		if err := forger.Publish(ctx, shared, forged[sent%len(forged)]).Err(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(period / 5)
	}
	for i, w := range ws {
		if err := w.failed(); err != nil {
			t.Fatalf("Watch %d lost its feed to forged heartbeats: %v", i, err)
		}
		w.mu.Lock()
		for _, s := range w.subs {
			if s.level != 0 || s.moving != "" || s.shared != shared {
				t.Errorf("Watch %d moved to %q (level %d, moving to %q); want it on %q", i, s.shared, s.level, s.moving, shared)
			}
			if s.replid != real || !s.checked.After(start) {
				t.Errorf("Watch %d believes replication ID %q, last checked %v before the forgery; want %q, checked since",
					i, s.replid, start.Sub(s.checked), real)
			}
		}
		w.mu.Unlock()
	}
	// The feeds carry what the coordinator publishes.
	tr := trip(t, c, "forged")
	for _, w := range ws {
		next(t, ctx, w, tr)
	}
}
