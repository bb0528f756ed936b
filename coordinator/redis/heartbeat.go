package redis

import (
	"context"
	"fmt"
	"strconv"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/cbgrpc/cbgrpc/coordinator"
)

// A subscription can go silent without an error: kept on a demoted master
// after a failover (go-redis never closes a pub/sub connection to the old
// master), half-open, behind a proxy that stopped forwarding, or on a
// Cluster node that no longer serves the slot. So a Watch proves its feed
// end to end with heartbeats on a channel that each of its subscriptions
// follows besides the scopes' channels: the shared heartbeat channel
// (sharedChannel), which every Watch on a single server follows, and on a
// Cluster every Watch subscribed to the node (in a slot of that node,
// heartbeatBase). Every heartbeat period (WithHeartbeat; 500 ms by
// default) one of them publishes on it, through the client's command
// connections, which go where the scripts' PUBLISH goes, and the rest hear
// it: a Watch publishes unless it heard another's heartbeat within the
// last period (so the one that published last goes on, and the first to
// notice a silence takes over). Two that published at once hear each
// other, and the one with the greater id yields. So a hot scope's master
// runs about two heartbeats a second per thousand replicas that follow it
// (a channel splits past that, sharedheartbeat.go), not two per replica.
//
// A heartbeat (heartbeat.lua) carries the replication ID of the node it
// runs on: the master's, which its replicas take on as they follow it, and
// which a replica promoted by a failover makes anew. A subscription keeps
// the first it hears.
//
// The feed is lost when:
//   - a heartbeat reaches no subscriber on the node the commands go to:
//     the publisher's subscription is not there (a failover, a moved slot);
//   - a heartbeat heard, or the reply to one published, carries another
//     replication ID than the subscription keeps: the subscription hears
//     another master's stream than it did (a demoted master made a
//     replica of the new one, which delivers what the new master
//     publishes once it has resynchronised, but not what came before:
//     0.8 s of heartbeats, measured with redistest's Sentinel), or the
//     Watch publishes to another master than it hears;
//   - no heartbeat has come for three periods: the path from the node is
//     broken;
//   - Redis unsubscribes a channel on its own: its slot moved, or a
//     Cluster master was demoted (see confirmed).
//
// With the default period, within 2 s, worst case: a path that breaks at F
// has delivered its last heartbeat at H <= F, and the reader's read
// deadline is H + 3 periods (plus the time the reader waited for Next to
// take a transition, which is no silence), so Next reports the loss by
// F + 1.5 s; a failover by the first heartbeat published on the new master
// once the old one follows it, or by the first the Watch sends there when
// none of its kind follows there (measured after the replica's promotion
// with Sentinel, whose announcement takes most of it: 0.5-1.3 s; 0.05 s
// on a Cluster, by the unsubscription). A false alarm takes three periods
// in a row with no heartbeat, a stall of 1 s; with the package's tests in
// parallel under -race on 2 cores, heartbeats came at most 502 ms apart.
//
// What no heartbeat can tell: a Watch whose commands go to a new master
// while its subscription stays on an old one that others still publish
// to, as in a split brain (a master cut off from the Sentinels but not
// from some clients) or a proxy that moved only new connections. The
// heartbeats it hears are whole; it learns the new master's answers from
// its own calls' replies, and tells the difference the first time it
// publishes a heartbeat itself, or once the old master rejoins as a
// replica (the next heartbeat it relays carries the new ID) or the last
// Watch that publishes there moves (silence). Redis's min-replicas-to-write
// keeps such a master from taking the stale Watches' writes, their trips
// among them, but not their heartbeats, which write nothing.
//
// The cost, per node that serves a scope the replica follows: a command a
// period per shared channel, which every follower of it receives, and
// nothing per replica. Redis spends 19 µs on the heartbeat script on a
// busy server (BenchmarkBusyServer), several times that on an idle one,
// where each command is its own turn of the event loop, and 2.1-2.6 µs
// for each follower a heartbeat reaches, all in one turn (10-18 µs each
// on an idle server over loopback, BenchmarkIdleServer), which is why a
// channel splits past 1,000 followers (sharedheartbeat.go).
// The defaults; WithHeartbeat sets another period.
const (
	heartbeatEvery = 500 * time.Millisecond
	// silencePeriods is the silence bound in periods.
	silencePeriods = 3
)

// silence is how long a subscription may hear no heartbeat before its
// feed is lost.
func (c *Coordinator) silence() time.Duration { return silencePeriods * c.heartbeat }

// beat publishes the heartbeats every period until the Watch ends.
// A Watch that follows no scope has no subscription, nothing to miss, and
// publishes nothing.
func (w *watch) beat() {
	defer w.wg.Done()
	tick := time.NewTicker(w.c.heartbeat)
	defer tick.Stop()
	for {
		select {
		case <-w.life.Done():
			return
		case <-tick.C:
		}
		w.publish()
	}
}

// A heartbeat is one publication on a subscription's shared channel.
type heartbeat struct {
	s         *sub
	ch        string // taken with w.mu held: the shared channel moves (moved)
	followers string
	sent      *goredis.Cmd
}

// publish sends the heartbeats due this period on the shared channels of
// the subscriptions whose channels Redis confirmed, in one pipeline (on a
// Cluster, one round trip per node, in parallel), and ends the Watch if
// one tells that the feed is lost.
func (w *watch) publish() {
	now := time.Now()
	w.mu.Lock()
	var beats []heartbeat
	for _, s := range w.subs {
		if s.beating && s.shares(now, w.c.heartbeat) {
			b := heartbeat{s: s, ch: s.shared}
			if s.followers > 0 {
				b.followers = strconv.Itoa(s.followers)
			}
			beats = append(beats, b)
		}
	}
	w.mu.Unlock()
	if len(beats) == 0 {
		return
	}
	// A heartbeat later than this is no use: the reader has given up.
	ctx, cancel := context.WithTimeout(w.life, w.c.silence())
	defer cancel()
	script := w.c.scripts.heartbeat
	w.c.client.Pipelined(ctx, func(p goredis.Pipeliner) error {
		for i, b := range beats {
			beats[i].sent = script.EvalSha(ctx, p, []string{b.ch}, w.id, b.followers)
		}
		return nil
	})
	for i, b := range beats {
		if goredis.HasErrorPrefix(b.sent.Err(), "NOSCRIPT") {
			// After a restart or SCRIPT FLUSH: the script goes along.
			beats[i].sent = script.Eval(ctx, w.c.client, []string{b.ch}, w.id, b.followers)
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, b := range beats {
		reply, err := b.sent.Slice()
		if err == nil && len(reply) != 2 {
			err = fmt.Errorf("redis coordinator: heartbeat: unexpected reply %v", reply)
		}
		switch {
		case b.s.closed:
			// Unfollow closed it meanwhile: its subscriber is gone.
		case b.ch != b.s.shared:
			// It moved to another shared channel meanwhile: what the
			// one it left says is no news.
		case err != nil:
			// The heartbeat will not come: the reader reports the silence.
			b.s.unsent = err
		default:
			n, _ := reply[0].(int64)
			replid, _ := reply[1].(string)
			if err := b.s.lineage(n, replid); err != nil {
				w.failLocked(err)
				continue
			}
			b.s.unsent, b.s.followers = nil, int(n)
		}
	}
}

// lineage takes the reply to a heartbeat published for s: the followers
// it reached on the node the commands go to, and that node's replication
// ID. w.mu is held.
func (s *sub) lineage(reached int64, replid string) error {
	switch {
	case reached == 0:
		return fmt.Errorf("redis coordinator: watch: the heartbeat reached no subscriber on the node the commands go to, "+
			"not%s where the subscription is (a failover, or a moved slot): %w", on(s.node), coordinator.ErrFeedLost)
	case !s.sameStream(replid):
		return fmt.Errorf("redis coordinator: watch: the heartbeat went to a node of another master's replication ID (%.8s) "+
			"than the subscription%s hears (%.8s): a failover, or a proxy that moved: %w", replid, on(s.node), s.replid, coordinator.ErrFeedLost)
	}
	return nil
}

// sameStream takes the replication ID a heartbeat of s's shared channel
// carries, heard or in the reply to one s published, and reports whether
// it is that of the stream the subscription hears: the first one taken.
// w.mu is held.
func (s *sub) sameStream(replid string) bool {
	if s.replid == "" {
		s.replid = replid
	}
	return replid == s.replid
}

// silence is the error of a subscription that heard no heartbeat for d.
func (w *watch) silence(s *sub, d time.Duration) error {
	w.mu.Lock()
	unsent := s.unsent
	w.mu.Unlock()
	why := ""
	if unsent != nil {
		why = fmt.Sprintf(" (the last could not be published: %v)", unsent)
	}
	return fmt.Errorf("redis coordinator: watch: no heartbeat heard%s for %v%s: %w",
		on(s.node), d.Round(time.Millisecond), why, coordinator.ErrFeedLost)
}

// on names a Cluster node in a message; a single server needs no name.
func on(node string) string {
	if node == "" {
		return ""
	}
	return " on " + node
}
