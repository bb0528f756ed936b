package redis

import (
	"context"
	"fmt"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/cbgrpc/cbgrpc/coordinator"
)

// A subscription can go silent without an error: kept on a demoted master
// after a failover (go-redis never closes a pub/sub connection to the old
// master), half-open, behind a proxy that stopped forwarding, or on a
// Cluster node that no longer serves the slot. So a Watch proves its feed
// end to end. Each subscription also follows a heartbeat channel of the
// Watch's own, in the slot of the scope it was opened for, and every
// heartbeat period (WithHeartbeat; 500 ms by default) the Watch publishes
// on it through the client's command connections, which go where the
// scripts' PUBLISH goes. The feed is lost when:
//   - the reply, which counts the subscribers on the node that ran the
//     command, is 0: the commands reach a node the subscription is not on
//     (the new master after a failover, the new owner of a slot). Silence
//     alone would miss this: a demoted master made a replica receives
//     what the new master publishes once it has resynchronised, but not
//     what came before (measured with redistest's Sentinel: 0.8 s of
//     heartbeats lost, then heard again). A client subscribed on the new
//     master to a pattern matching every channel would hide it;
//   - no heartbeat has come back for three periods: the path from the node
//     is broken;
//   - Redis unsubscribes a channel on its own: its slot moved (see
//     confirmed).
//
// With the default period, within 2 s, worst case: a path that breaks at F has delivered its last
// heartbeat at H <= F, and the reader's read deadline is H + 3 periods
// (plus the time the reader waited for Next to take a transition, which
// is no silence), so Next reports the loss by F + 1.5 s; a failover or a
// moved slot by the first heartbeat the client sends to the new node, at
// most a period and a round trip after the client follows it
// (measured: 0.5-1.3 s after the replica's promotion with Sentinel, whose
// announcement takes most of it; 0.05 s on a Cluster, by the
// unsubscription). A false alarm takes three heartbeats in a row missed,
// a stall of 1 s; with the package's tests in parallel under -race on 2
// cores, heartbeats came at most 502 ms apart.
//
// The cost: 2 commands a second per replica and per node that serves a
// scope it follows (a replica that follows no scope sends none). Measured
// by BenchmarkHeartbeat on a 2-core VM, each heartbeat its own turn of an
// idle server's event loop: 85-130 µs of Redis CPU a second per replica
// and node on one server (INFO cpu; PUBLISH's own execution, INFO
// commandstats, is 5-13 µs of it, the rest reading the command and writing
// two replies, as for any command here), 150-210 µs on a Cluster node
// (SPUBLISH 12-17 µs). A busy server, whose event loop serves many
// connections a turn, spends 15 µs a heartbeat (BenchmarkBusyServer): 30
// µs a second per replica and node, what capacity is planned by.
// Heartbeats every 250 ms cost twice that and only hear of a failover
// sooner.
// The defaults; WithHeartbeat sets another period, and the silence bound
// is always three periods.
const (
	heartbeatEvery = 500 * time.Millisecond
	silenceBound   = 3 * heartbeatEvery
)

// silence is how long a subscription may hear no heartbeat before its
// feed is lost.
func (c *Coordinator) silence() time.Duration { return 3 * c.heartbeat }

// heartbeatChannel names the heartbeat channel of the Watch id on the
// subscription that opened with ch, a scope's channel: in ch's hash tag,
// so that the channel lives in the slot of that scope, on the node the
// subscription is on. The prefix holds no brace (see New): the first '}'
// ends the tag.
func heartbeatChannel(ch, id string) string {
	return ch[:strings.IndexByte(ch, '}')+1] + ":heartbeat:" + id
}

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

// publish sends one heartbeat on every subscription whose heartbeat
// channel Redis confirmed, in one pipeline (on a Cluster, one round trip
// per node, in parallel), and ends the Watch if one reached no subscriber.
func (w *watch) publish() {
	w.mu.Lock()
	var subs []*sub
	for _, s := range w.subs {
		if s.beating {
			subs = append(subs, s)
		}
	}
	w.mu.Unlock()
	if len(subs) == 0 {
		return
	}
	// A heartbeat later than this is no use: the reader has given up.
	ctx, cancel := context.WithTimeout(w.life, w.c.silence())
	defer cancel()
	sent := make([]*goredis.IntCmd, len(subs))
	w.c.client.Pipelined(ctx, func(p goredis.Pipeliner) error {
		for i, s := range subs {
			if w.c.sharded {
				sent[i] = p.SPublish(ctx, s.heartbeat, "")
			} else {
				sent[i] = p.Publish(ctx, s.heartbeat, "")
			}
		}
		return nil
	})
	w.mu.Lock()
	defer w.mu.Unlock()
	for i, s := range subs {
		n, err := sent[i].Result()
		switch {
		case s.closed:
			// Unfollow closed it meanwhile: its subscriber is gone.
		case err != nil:
			// The heartbeat will not come: the reader reports the silence.
			s.unsent = err
		case n == 0:
			w.failLocked(fmt.Errorf("redis coordinator: watch: the heartbeat reached no subscriber on the node the commands go to, "+
				"not%s where the subscription is (a failover, or a moved slot): %w", on(s.node), coordinator.ErrFeedLost))
		default:
			s.unsent = nil
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
