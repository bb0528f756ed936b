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
// replication ID of the node it ran on (heartbeat.lua). The others take
// what they hear as a hint and check what they doubt with a census
// (census.lua). The feed is lost when a reply counts no subscriber, or
// names another ID than the subscription's first reply, or when no
// heartbeat comes for silencePeriods. The
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

// A heartbeat is one publication on a subscription's shared channel, or a
// census of it (census.lua), which publishes nothing.
type heartbeat struct {
	s         *sub
	ch        string // taken with w.mu held: the shared channel moves (moved)
	followers string
	census    bool
	sent      *goredis.Cmd
}

// publish sends, in one pipeline (on a Cluster, one round trip per node,
// in parallel), the heartbeats due this period on the shared channels of
// the subscriptions whose channels Redis confirmed, and the census of
// those in doubt; it ends the Watch if a reply tells that the feed is
// lost, and moves a subscription to the level its channel's count calls
// for. Only the replies are believed (see heardShared).
func (w *watch) publish() {
	now := time.Now()
	w.mu.Lock()
	var beats []heartbeat
	for _, s := range w.subs {
		switch {
		case !s.beating:
		case s.shares(now, w.c.heartbeat):
			b := heartbeat{s: s, ch: s.shared}
			if s.followers > 0 {
				b.followers = strconv.Itoa(s.followers)
			}
			beats = append(beats, b)
		case s.doubts(now, w.c.heartbeat):
			beats = append(beats, heartbeat{s: s, ch: s.shared, census: true})
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
			beats[i].sent = b.script().EvalSha(ctx, p, []string{b.ch}, b.args(w.id)...)
		}
		return nil
	})
	for i, b := range beats {
		if goredis.HasErrorPrefix(b.sent.Err(), "NOSCRIPT") {
			// After a restart or SCRIPT FLUSH: the script goes along.
			beats[i].sent = b.script().Eval(ctx, w.c.client, []string{b.ch}, b.args(w.id)...)
		}
	}
	// The subscriptions to move, and where: each subscribes by w.move.
	type moveTo struct {
		s  *sub
		ch string
	}
	var moves []moveTo
	w.mu.Lock()
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
		case err != nil && !b.census:
			// The heartbeat will not come: the reader reports the silence.
			b.s.unsent = err
		case err != nil:
			// A census refused (a grant without PUBSUB NUMSUB) or lost:
			// the Watch settles its doubt with a heartbeat of its own
			// next period, whose reply tells as much.
			b.s.other, b.s.smaller = time.Time{}, time.Time{}
		default:
			if err := b.s.lineage(reached, replid); err != nil {
				w.failLocked(err)
				continue
			}
			b.s.checked, b.s.doubt = now, false
			if !b.census {
				b.s.unsent, b.s.followers = nil, int(reached)
			}
			if to := level(int(reached), b.s.level, w.c.sharedCap); to != b.s.level && b.s.moving == "" {
				b.s.moving, b.s.movingLevel = sharedChannel(b.s.base, to, w.id), to
				moves = append(moves, moveTo{b.s, b.s.moving})
			}
		}
	}
	w.mu.Unlock()
	for _, m := range moves {
		w.move(m.s, m.ch)
	}
}

// script is the script that sends b, in the pub/sub b's subscription
// subscribed by; args are its arguments.
func (b heartbeat) script() *goredis.Script {
	set := plainScripts
	if b.s.sharded {
		set = shardedScripts
	}
	if b.census {
		return set.census
	}
	return set.heartbeat
}

func (b heartbeat) args(id string) []any {
	if b.census {
		return nil
	}
	return []any{id, b.followers}
}

// lineage takes the reply to a heartbeat or census of s: the followers of
// its shared channel on the node the commands go to, and that node's
// replication ID. The first reply says which stream the subscription
// hears. w.mu is held.
func (s *sub) lineage(reached int64, replid string) error {
	if s.replid == "" {
		s.replid = replid
	}
	switch {
	case reached == 0:
		return fmt.Errorf("redis coordinator: watch: the shared heartbeat channel has no subscriber on the node the commands go to, "+
			"not%s where the subscription is (a failover, or a moved slot): %w", on(s.node), coordinator.ErrFeedLost)
	case replid != s.replid:
		return fmt.Errorf("redis coordinator: watch: the commands go to a node of another master's replication ID (%.8s) "+
			"than the subscription%s was made on (%.8s): a failover, or a proxy that moved: %w", replid, on(s.node), s.replid, coordinator.ErrFeedLost)
	}
	return nil
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
