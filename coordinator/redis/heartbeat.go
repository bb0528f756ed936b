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
// end to end, by publishing through the client's command connections,
// which go where the scripts' PUBLISH goes, on two channels that each of
// its subscriptions follows besides the scopes' channels (on a Cluster,
// both in a slot of the subscription's node, heartbeatBase):
//   - the shared heartbeat channel (sharedChannel), which every Watch on a
//     single server follows, and on a Cluster every Watch subscribed to
//     the node. Every heartbeat period (WithHeartbeat; 500 ms by default)
//     one of them publishes its id on it, and the rest hear it: a Watch
//     publishes unless it heard another's heartbeat within the last period
//     (so the one that published last goes on, and the first to notice a
//     silence takes over). Two that published at once hear each other, and the one with
//     the greater id yields. So a hot scope's master runs about two
//     heartbeats a second per thousand replicas that follow it (a channel
//     splits past that, sharedheartbeat.go), not two per replica;
//   - the Watch's own channel, which only it follows. Every third period
//     it publishes there, to learn from the reply how many clients of the
//     node the commands reach follow it: none means that its subscription
//     is not on that node (a failover, a moved slot). The shared channel
//     cannot tell this: once another replica has subscribed on the new
//     master, its count is not zero.
//
// The feed is lost when:
//   - a heartbeat on either channel reaches no subscriber. Silence alone
//     would miss this: a demoted master made a replica receives what the
//     new master publishes once it has resynchronised, but not what came
//     before (measured with redistest's Sentinel: 0.8 s of heartbeats
//     lost, then heard again). A client subscribed on the new master to a
//     pattern matching every channel would hide it;
//   - no heartbeat, on either channel, has come for three periods: the
//     path from the node is broken;
//   - Redis unsubscribes a channel on its own: its slot moved (see
//     confirmed).
//
// With the default period, within 2 s, worst case: a path that breaks at F
// has delivered its last heartbeat at H <= F, and the reader's read
// deadline is H + 3 periods (plus the time the reader waited for Next to
// take a transition, which is no silence), so Next reports the loss by
// F + 1.5 s; a failover or a moved slot by the first heartbeat the Watch
// sends to the new node that none of its kind follows there: the next
// shared heartbeat, at most a period and a round trip after the client
// follows it, when it is the first of the fleet there, or else its own,
// at most three periods after (measured after the replica's promotion
// with Sentinel, whose announcement takes most of it: 0.5-1.3 s for the
// first Watch there, 1.8 s for one whose own channel tells; 0.05 s on a
// Cluster, by the unsubscription). A false alarm takes three periods in
// a row with no heartbeat, a stall of 1 s; with the package's tests in
// parallel under -race on 2 cores, heartbeats came at most 502 ms apart.
//
// The cost, per node that serves a scope the replica follows: a third of a
// command a period per replica (its own channel), and a command a period
// per shared channel, which every follower of it receives. Redis spends
// 6-15 µs a command on a busy server (BenchmarkBusyServer), 40-110 µs on
// an idle one, where each command is its own turn of the event loop, and
// 2.1-2.6 µs for each follower a shared heartbeat reaches, all in one
// turn, which is why a channel splits past 1,000 followers
// (sharedheartbeat.go). A heartbeat every period from every replica, as
// before the shared channel, cost three times as many commands.
// The defaults; WithHeartbeat sets another period, and the silence bound
// is always three periods.
const (
	heartbeatEvery = 500 * time.Millisecond
	// silencePeriods is the silence bound in periods, and how many
	// periods apart a Watch publishes on its own channel, so that a
	// failover is told within the bound too.
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
	for n := 0; ; n++ {
		select {
		case <-w.life.Done():
			return
		case <-tick.C:
		}
		w.publish(n%silencePeriods == 0)
	}
}

// A heartbeat is one publication on a subscription's heartbeat channels.
type heartbeat struct {
	s       *sub
	own     bool   // on the Watch's own channel; else on the shared one
	ch, msg string // taken with w.mu held: the shared channel moves (moved)
	sent    *goredis.IntCmd
}

// publish sends the heartbeats due on every subscription whose heartbeat
// channels Redis confirmed, on its own channel when own and on the shared
// one when it shares, in one pipeline (on a Cluster, one round trip per
// node, in parallel), and ends the Watch if one reached no subscriber.
func (w *watch) publish(own bool) {
	now := time.Now()
	w.mu.Lock()
	var beats []heartbeat
	for _, s := range w.subs {
		if !s.beating {
			continue
		}
		if own {
			beats = append(beats, heartbeat{s: s, own: true, ch: s.heartbeat})
		}
		if s.shares(now, w.c.heartbeat) {
			msg := w.id
			if s.followers > 0 {
				msg += " " + strconv.Itoa(s.followers)
			}
			beats = append(beats, heartbeat{s: s, ch: s.shared, msg: msg})
		}
	}
	w.mu.Unlock()
	if len(beats) == 0 {
		return
	}
	// A heartbeat later than this is no use: the reader has given up.
	ctx, cancel := context.WithTimeout(w.life, w.c.silence())
	defer cancel()
	w.c.client.Pipelined(ctx, func(p goredis.Pipeliner) error {
		for i, b := range beats {
			if w.c.sharded {
				beats[i].sent = p.SPublish(ctx, b.ch, b.msg)
			} else {
				beats[i].sent = p.Publish(ctx, b.ch, b.msg)
			}
		}
		return nil
	})
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, b := range beats {
		n, err := b.sent.Result()
		switch {
		case b.s.closed:
			// Unfollow closed it meanwhile: its subscriber is gone.
		case !b.own && b.ch != b.s.shared:
			// It moved to another shared channel meanwhile: what the
			// one it left says is no news.
		case err != nil:
			// The heartbeat will not come: the reader reports the silence.
			b.s.unsent = err
		case n == 0:
			w.failLocked(fmt.Errorf("redis coordinator: watch: the heartbeat reached no subscriber on the node the commands go to, "+
				"not%s where the subscription is (a failover, or a moved slot): %w", on(b.s.node), coordinator.ErrFeedLost))
		default:
			b.s.unsent = nil
			if !b.own {
				b.s.followers = int(n)
			}
		}
	}
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
