package redis

import (
	"context"
	"fmt"
	"strconv"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/cbgrpc/cbgrpc/coordinator"
)

// Heartbeats prove a Watch's feed end to end: every period one of the
// Watches that share a heartbeat channel (sharedheartbeat.go) publishes
// on it, through the command connections, a heartbeat carrying the
// replication ID of the node it ran on (heartbeat.lua), and the feed is
// lost when one reaches no subscriber, carries another ID than the
// subscription heard first, or does not come for silencePeriods. The
// protocol, what it tells and what it cannot, is described in
// docs/architecture.md ("The feed's liveness protocol").

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
	w.c.client.Pipelined(ctx, func(p goredis.Pipeliner) error {
		for i, b := range beats {
			beats[i].sent = b.s.heartbeat().EvalSha(ctx, p, []string{b.ch}, w.id, b.followers)
		}
		return nil
	})
	for i, b := range beats {
		if goredis.HasErrorPrefix(b.sent.Err(), "NOSCRIPT") {
			// After a restart or SCRIPT FLUSH: the script goes along.
			beats[i].sent = b.s.heartbeat().Eval(ctx, w.c.client, []string{b.ch}, w.id, b.followers)
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, b := range beats {
		reply, err := b.sent.Slice()
		var reached int64
		var replid string
		if err == nil {
			p := readPairs(reply)
			reached, replid = p.int("followers"), p.str("replid")
			if p.err != nil {
				err = fmt.Errorf("redis coordinator: heartbeat: unexpected reply %v", reply)
			}
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
			if err := b.s.lineage(reached, replid); err != nil {
				w.failLocked(err)
				continue
			}
			b.s.unsent, b.s.followers = nil, int(reached)
		}
	}
}

// heartbeat is the script that publishes s's heartbeats, in the pub/sub
// s subscribed by.
func (s *sub) heartbeat() *goredis.Script {
	if s.sharded {
		return shardedScripts.heartbeat
	}
	return plainScripts.heartbeat
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
	switch {
	case replyKind(unsent) == coordinator.KindPermission:
		// Each server words the refusal its own way (replyerrors.go).
		why = fmt.Sprintf(" (the last could not be published: the ACL refused the heartbeat script: %v)", unsent)
	case unsent != nil:
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
