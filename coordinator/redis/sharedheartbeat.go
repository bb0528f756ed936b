package redis

import (
	"context"
	"fmt"
	"hash/fnv"
	"strconv"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// The shared heartbeat channel (see heartbeat.go): its name, whose turn it
// is to publish, and how it splits when it has too many followers.
//
// A heartbeat on a channel reaches all its followers in one turn of the
// node's event loop, a few µs each (bench/RESULTS.md, BenchmarkBusyServer):
// 10,000 would hold the node for tens of ms. So a channel keeps about
// sharedCap followers at most.
// The publisher says in each heartbeat how many the previous one reached
// (PUBLISH's reply). Over sharedCap, every follower moves one level or
// more deeper: level L has 2^L channels, and a Watch takes the one its id
// hashes to. Under a quarter of it, they move a level back up. The
// publisher moves on its reply; the followers hear the count, and each
// moves on its own census of the channel (census.lua), in the next period;
// a Watch listens on the old channel until Redis confirms the new one.

// sharedCap is how many followers a shared channel keeps at most: its
// heartbeat then holds the node about 2.5 ms.
const sharedCap = 1000

// heartbeatBase is the start of the names of the heartbeat channels of a
// subscription to node, in a slot that node serves, so that every Watch
// subscribed to it shares one channel whatever scopes it follows. A
// single server has no slots: <prefix>v2:{fleet}:heartbeat. On a Cluster
// the tag is the first of {hb0}, {hb1}, ... whose slot the client's map
// puts on node (three tries, on average, with three masters); each
// client makes the same choice from the same map. A slot that moves later
// takes the subscription with it, which Redis tells (confirmed), and the
// next Watch chooses again.
func (c *Coordinator) heartbeatBase(ctx context.Context, node string) (string, error) {
	if !c.cluster {
		return c.prefix + layout + ":{fleet}:heartbeat", nil
	}
	cc := c.client.(*goredis.ClusterClient)
	for i := 0; i < heartbeatTags; i++ {
		base := c.prefix + layout + ":{hb" + strconv.Itoa(i) + "}:heartbeat"
		master, err := cc.MasterForKey(ctx, base)
		if err != nil {
			return "", err
		}
		if master.Options().Addr == node {
			return base, nil
		}
	}
	return "", fmt.Errorf("none of %d heartbeat tags has its slot on %s", heartbeatTags, node)
}

// heartbeatTags is how many tags heartbeatBase tries: with a node serving
// one slot in a hundred, the chance that none of them is there is 1e-13.
const heartbeatTags = 3000

// sharedChannel names the shared channel of the Watch id at level, under
// base: base itself at level 0, else base:<level>.<group>.
func sharedChannel(base string, level int, id string) string {
	if level == 0 {
		return base
	}
	h := fnv.New32a()
	h.Write([]byte(id))
	return base + ":" + strconv.Itoa(level) + "." + strconv.FormatUint(uint64(h.Sum32()&(1<<level-1)), 10)
}

// level is the level a shared channel at level at should move to when its
// heartbeat reached followers: deeper until a channel would have at most
// limit, one up once it has under a quarter of limit.
func level(followers, at, limit int) int {
	switch {
	case followers > limit:
		for ; followers > limit; at++ {
			followers = (followers + 1) / 2
		}
	case at > 0 && 4*followers < limit:
		at--
	}
	return at
}

// shares reports whether s publishes on its shared channel this period:
// unless it heard another Watch's heartbeat there within the last period
// and a half, or, when it published there itself the period before,
// unless one of them came from a Watch of a smaller id. Half a period
// more than the heartbeats' own: a heartbeat that comes a little late (a
// loaded host delays the publisher's tick or this reader) is no silence
// to take over, which with one period of it every Watch did in turn.
// Taking over within 2.5 periods of the last heartbeat still comes before
// the 3 periods of silence that lose the feed.
func (s *sub) shares(now time.Time, period time.Duration) bool {
	recent := func(t time.Time) bool { return now.Sub(t) < period+period/2 }
	s.sharing = !recent(s.other) || s.sharing && !recent(s.smaller)
	return s.sharing
}

// heardShared takes a message heard on s's shared channel at, and reports
// whether it is a heartbeat, which proves the subscription alive:
// "<id> <replid>", or "<id> <replid> <followers>" (how many the
// publisher's previous heartbeat reached; heartbeat.lua). Anyone who may
// publish there can send one, so what it says is a hint: a heartbeat of
// another stream than the replies named, or a count that would move s to
// another level, only puts s in doubt, which its next census settles
// (doubts), and only a heartbeat of the stream counts as another Watch's
// turn. A message no Watch sends is not heard at all.
func (w *watch) heardShared(s *sub, payload string, at time.Time) bool {
	id, rest, _ := strings.Cut(payload, " ")
	replid, count, _ := strings.Cut(rest, " ")
	if id == "" || !isReplid(replid) {
		return false
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if s.replid == "" || replid != s.replid {
		s.doubt = true
		return false
	}
	if id != w.id {
		s.other = at
		if id < w.id {
			s.smaller = at
		}
	}
	if followers, err := strconv.Atoi(count); err == nil && followers > 0 && level(followers, s.level, w.c.sharedCap) != s.level {
		s.doubt = true
	}
	return true
}

// censusPeriods is how many periods a subscription that publishes no
// heartbeat goes without a census when nothing put it in doubt: a bound
// on how long heartbeats forged with the right replication ID, which
// keep it from publishing, can hide a failover from it.
const censusPeriods = 20

// doubts reports whether s, publishing no heartbeat this period, takes a
// census of its shared channel: in doubt, at most once a period, else
// once every censusPeriods.
func (s *sub) doubts(now time.Time, period time.Duration) bool {
	since := now.Sub(s.checked)
	return s.doubt && since >= period || since >= censusPeriods*period
}

// isReplid reports whether f is a replication ID (40 hexadecimal digits)
// or heartbeat.lua's "-" for a server whose INFO has none.
func isReplid(f string) bool {
	if f == "-" {
		return true
	}
	if len(f) != 40 {
		return false
	}
	for _, c := range f {
		if !strings.ContainsRune("0123456789abcdef", c) {
			return false
		}
	}
	return true
}

// moved takes Redis's confirmation of the channel s was moving to, and
// returns the one it leaves, which the caller unsubscribes. w.mu is held.
func (s *sub) moved() (left string) {
	left = s.shared
	s.shared, s.level, s.moving = s.moving, s.movingLevel, ""
	s.sharing, s.other, s.smaller, s.followers = false, time.Time{}, time.Time{}, 0
	s.leaving[left]++
	return left
}

// move subscribes s to the shared channel ch; confirmed then moves s
// there.
func (w *watch) move(s *sub, ch string) {
	var err error
	if s.sharded {
		err = s.ps.SSubscribe(w.life, ch)
	} else {
		err = s.ps.Subscribe(w.life, ch)
	}
	if err != nil {
		// The connection broke: the reader hears it next.
		w.mu.Lock()
		s.moving = ""
		w.mu.Unlock()
	}
}

// leave unsubscribes s from the shared channel it left, from s's reader.
func (w *watch) leave(s *sub, ch string) {
	if s.sharded {
		s.ps.SUnsubscribe(w.life, ch)
	} else {
		s.ps.Unsubscribe(w.life, ch)
	}
}
