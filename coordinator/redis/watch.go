package redis

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/cbgrpc/cbgrpc/coordinator"
)

var _ coordinator.Watcher = (*Coordinator)(nil)

// Watch implements [coordinator.Watcher] with Redis pub/sub: every script
// that moves a breaker publishes the transition on the scope's channel.
// On a single server one connection carries every followed scope; on a
// Redis Cluster there is one sharded subscription per node that owns a
// followed scope. Unfollow unsubscribes, and closes a node's connection
// once it follows nothing more. A broken connection ends the Watch with
// [coordinator.ErrFeedLost]: go-redis would resubscribe on its own, but
// what was published meanwhile is gone. So does a connection that goes
// silent, which the Watch's heartbeats reveal (see the package
// documentation).
func (c *Coordinator) Watch(ctx context.Context) (coordinator.Watch, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("redis coordinator: watch: %w", err)
	}
	life, end := context.WithCancel(context.Background())
	w := &watch{
		c:       c,
		id:      rand.Text(),
		scopes:  make(map[string]string),
		nodes:   make(map[string]string),
		subs:    make(map[string]*sub),
		pending: make(map[string]chan struct{}),
		msgs:    make(chan *goredis.Message, 256),
		life:    life,
		end:     end,
	}
	w.wg.Add(1)
	go w.beat()
	return w, nil
}

type watch struct {
	c    *Coordinator
	id   string // says which Watch published a heartbeat, and places it on a level's channels
	msgs chan *goredis.Message
	// life ends with the Watch: by Close, or at the first sign that the
	// feed is lost.
	life context.Context
	end  context.CancelFunc

	// following serialises Follow and Unfollow, which wait for Redis
	// while not holding mu.
	following sync.Mutex

	mu      sync.Mutex
	scopes  map[string]string        // channel -> scope, of the followed scopes
	nodes   map[string]string        // channel -> node of the subscription it is on
	subs    map[string]*sub          // node address ("" on a single server) -> its subscription
	pending map[string]chan struct{} // channel -> closed when Redis confirms the subscription
	// policies hears the changes of overrides, once FollowPolicies set
	// it; fleet is the channel of the fleet default's.
	policies func(coordinator.PolicyChange)
	fleet    string
	err      error // why life ended
	wg       sync.WaitGroup
}

// sub is one subscription: a connection to one node, which carries the
// heartbeats from that node besides the scopes' channels (heartbeat.go).
type sub struct {
	ps      *goredis.PubSub
	sharded bool   // by SSUBSCRIBE: on a Cluster that has it (features.go)
	node    string // its key in watch.subs
	base    string // the start of its shared heartbeat channels' names (heartbeatBase)
	shared  string // the channel of the heartbeats shared with other Watches
	// replid is the replication ID of the stream the subscription hears,
	// as the first reply to a heartbeat or census named it (lineage);
	// checked is when the last reply came, and doubt says that a message
	// heard since calls for a census (doubts).
	replid  string
	checked time.Time
	doubt   bool
	// level is the shared channel's level, moving the one Redis has yet
	// to confirm, at movingLevel, and followers how many the Watch's last
	// heartbeat on it reached (sharedheartbeat.go).
	level, movingLevel int
	moving             string
	followers          int
	channels           int  // scope channels followed on it, or being followed
	closed             bool // closed because it follows nothing more: its reader ends quietly
	beating            bool // Redis confirmed the shared heartbeat channel: heartbeats go out
	// sharing: it published on the shared channel the last period; other
	// and smaller: when it last heard another Watch's heartbeat there,
	// and one of a Watch with a smaller id (see shares).
	sharing        bool
	other, smaller time.Time
	// leaving counts the unsubscriptions asked for and not yet confirmed,
	// by channel: any other one is Redis's own doing.
	leaving map[string]int
	// unsent is why the last heartbeat could not be published, if it
	// could not: it explains a silence.
	unsent error
}

var errWatchClosed = errors.New("redis coordinator: watch closed")

// failed returns why the Watch ended, or nil.
func (w *watch) failed() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}

func (w *watch) Follow(ctx context.Context, scopes ...string) error {
	w.following.Lock()
	defer w.following.Unlock()
	if err := w.failed(); err != nil {
		return err
	}
	for _, scope := range scopes {
		ch := scopeKeys(w.c.prefix, scope)[keyChannel]
		w.mu.Lock()
		_, ok := w.scopes[ch]
		w.mu.Unlock()
		if ok {
			continue
		}
		if err := w.subscribe(ctx, ch); err != nil {
			return fmt.Errorf("redis coordinator: watch %s: %w", abbreviate(scope), err)
		}
		w.mu.Lock()
		w.scopes[ch] = scope
		w.mu.Unlock()
	}
	return nil
}

func (w *watch) Unfollow(ctx context.Context, scopes ...string) error {
	w.following.Lock()
	defer w.following.Unlock()
	if err := w.failed(); err != nil {
		return err
	}
	var errs []error
	for _, scope := range scopes {
		if err := w.unsubscribe(ctx, scopeKeys(w.c.prefix, scope)[keyChannel]); err != nil {
			errs = append(errs, fmt.Errorf("redis coordinator: unfollow %s: %w", abbreviate(scope), err))
		}
	}
	return errors.Join(errs...)
}

// subscribe adds ch to the subscription of the node that owns it, making
// that subscription if needed, and returns once Redis confirmed it, so
// that a transition published afterwards cannot be missed. w.following is
// held.
func (w *watch) subscribe(ctx context.Context, ch string) error {
	node := ""
	cc, _ := w.c.client.(*goredis.ClusterClient)
	if w.c.cluster {
		master, err := cc.MasterForKey(ctx, ch)
		if err != nil {
			return err
		}
		node = master.Options().Addr
	}
	w.mu.Lock()
	s := w.subs[node]
	w.mu.Unlock()
	// confirm is the channel whose confirmation says that the subscription
	// holds: ch, or for a new subscription its shared heartbeat channel,
	// which Redis confirms after ch, or answers MOVED if the client's slot
	// map was stale.
	confirm, base := ch, ""
	if s == nil {
		var err error
		if base, err = w.c.heartbeatBase(ctx, node); err != nil {
			return err
		}
		confirm = sharedChannel(base, 0, w.id)
	}
	acked := make(chan struct{})
	w.mu.Lock()
	w.pending[confirm] = acked
	w.mu.Unlock()
	defer func() {
		w.mu.Lock()
		delete(w.pending, confirm)
		w.mu.Unlock()
	}()

	var err error
	switch {
	case s == nil:
		// The channel goes with the new subscription: a sharded one
		// connects to the node that owns its first channel.
		s = &sub{node: node, base: base, shared: confirm, leaving: make(map[string]int)}
		var srv server
		if srv, err = w.c.learn(ctx); err != nil {
			return err
		}
		if s.sharded = srv.sharded; s.sharded {
			// One SSUBSCRIBE takes channels of one slot.
			s.ps = cc.SSubscribe(ctx, ch)
			err = s.ps.SSubscribe(ctx, s.shared)
		} else {
			// On a Cluster, go-redis subscribes on the master of the
			// first channel's slot: node.
			s.ps = w.c.client.Subscribe(ctx, ch, s.shared)
		}
		if err != nil {
			s.ps.Close()
			return err
		}
		w.mu.Lock()
		if w.err != nil {
			w.mu.Unlock()
			s.ps.Close()
			return w.failed()
		}
		w.subs[node] = s
		w.wg.Add(1)
		go w.read(s)
		w.mu.Unlock()
	case s.sharded:
		err = s.ps.SSubscribe(ctx, ch)
	default:
		err = s.ps.Subscribe(ctx, ch)
	}
	w.mu.Lock()
	s.channels++
	w.nodes[ch] = node
	w.mu.Unlock()
	if err == nil {
		err = w.await(ctx, acked)
	}
	if err != nil {
		w.unsubscribe(ctx, ch)
	}
	return err
}

// await waits until Redis confirms a subscription.
func (w *watch) await(ctx context.Context, acked <-chan struct{}) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	select {
	case <-acked:
		return nil
	case <-w.life.Done():
		return fmt.Errorf("the subscription broke before Redis confirmed it: %w", w.failed())
	case <-ctx.Done():
		return fmt.Errorf("waiting for Redis to confirm the subscription: %w", ctx.Err())
	}
}

// unsubscribe removes ch from the Watch and from its subscription, and
// closes the subscription when it follows nothing more. Next drops the
// channel's messages from now on, even those already on their way.
// w.following is held.
func (w *watch) unsubscribe(ctx context.Context, ch string) error {
	w.mu.Lock()
	node, ok := w.nodes[ch]
	s := w.subs[node]
	delete(w.scopes, ch)
	delete(w.nodes, ch)
	if !ok || s == nil {
		// Not followed, or closed with the Watch.
		w.mu.Unlock()
		return nil
	}
	s.channels--
	if s.channels == 0 {
		s.closed = true
		delete(w.subs, node)
	} else {
		s.leaving[ch]++
	}
	w.mu.Unlock()
	switch {
	case s.closed:
		return s.ps.Close()
	case s.sharded:
		return s.ps.SUnsubscribe(ctx, ch)
	default:
		return s.ps.Unsubscribe(ctx, ch)
	}
}

// read forwards the messages of one subscription until it breaks, goes
// silent, or Unfollow closes it.
func (w *watch) read(s *sub) {
	defer w.wg.Done()
	heard := time.Now() // when the last heartbeat came
	for {
		wait := time.Until(heard.Add(w.c.silence()))
		if wait <= 0 {
			w.fail(w.silence(s, time.Since(heard)))
			return
		}
		msg, err := s.ps.ReceiveTimeout(w.life, wait)
		if err != nil {
			w.mu.Lock()
			quiet := s.closed
			w.mu.Unlock()
			var timeout net.Error
			switch {
			case quiet:
			case errors.As(err, &timeout) && timeout.Timeout():
				w.fail(w.silence(s, time.Since(heard)))
			default:
				// Both wrapped: a refusal stays one (Transient).
				w.fail(fmt.Errorf("redis coordinator: watch: %w: %w", err, coordinator.ErrFeedLost))
			}
			return
		}
		switch m := msg.(type) {
		case *goredis.Message:
			switch m.Channel {
			case s.shared:
				if at := time.Now(); w.heardShared(s, m.Payload, at) {
					heard = at
				}
				continue
			}
			if version, ok := strings.CutPrefix(m.Payload, "policy "); ok {
				w.policyChanged(m.Channel, version)
				continue
			}
			waited := time.Now()
			select {
			case w.msgs <- m:
			case <-w.life.Done():
				return
			}
			// Waiting for Next is no silence of the feed.
			heard = heard.Add(time.Since(waited))
		case *goredis.Subscription:
			left, err := w.confirmed(s, m)
			if err != nil {
				w.fail(err)
				return
			}
			if left != "" {
				w.leave(s, left)
			}
			if m.Channel == s.shared {
				heard = time.Now()
			}
		}
	}
}

// confirmed takes Redis's word on a change of s's channels: it wakes up
// the Follow waiting for a subscription, starts the heartbeats once their
// channel is subscribed, and moves to the shared channel s was moving to,
// returning the one it left. An unsubscription the Watch did not ask for
// (Redis 7 sends one to the subscribers of a slot that moved away) is a
// lost feed.
func (w *watch) confirmed(s *sub, m *goredis.Subscription) (left string, err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	switch m.Kind {
	case "subscribe", "ssubscribe":
		if acked, ok := w.pending[m.Channel]; ok {
			close(acked)
			delete(w.pending, m.Channel)
		}
		s.beating = s.beating || m.Channel == s.shared
		if m.Channel == s.moving && !s.closed {
			return s.moved(), nil
		}
	case "unsubscribe", "sunsubscribe":
		if s.leaving[m.Channel] == 0 {
			what := "a heartbeat channel"
			if scope, ok := w.scopes[m.Channel]; ok {
				what = abbreviate(scope)
			}
			return "", fmt.Errorf("redis coordinator: watch: Redis%s unsubscribed %s on its own (its slot moved?): %w",
				on(s.node), what, coordinator.ErrFeedLost)
		}
		s.leaving[m.Channel]--
		if s.leaving[m.Channel] == 0 {
			delete(s.leaving, m.Channel)
		}
	}
	return "", nil
}

// fail ends the Watch with err, unless it has ended already.
func (w *watch) fail(err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.failLocked(err)
}

// failLocked is fail with w.mu held. On a Cluster it has go-redis reload
// the slot map, which may be what failed: the next Watch must not
// subscribe where a slot was (a MOVED answer), and nothing else refreshes
// the map when nothing else goes to that slot.
func (w *watch) failLocked(err error) {
	if w.err != nil {
		return
	}
	w.err = err
	w.end()
	if cc, ok := w.c.client.(*goredis.ClusterClient); ok && err != errWatchClosed {
		cc.ReloadState(context.Background())
	}
}

func (w *watch) Next(ctx context.Context) (coordinator.Transition, error) {
	for {
		var m *goredis.Message
		select {
		case m = <-w.msgs:
		case <-w.life.Done():
			return coordinator.Transition{}, w.failed()
		case <-ctx.Done():
			return coordinator.Transition{}, ctx.Err()
		}
		w.mu.Lock()
		scope, ok := w.scopes[m.Channel]
		w.mu.Unlock()
		if !ok {
			// Published before the scope was unfollowed.
			continue
		}
		t, ok := parseTransition(scope, m.Payload)
		if !ok {
			// Not from a script of ours: anyone with PUBLISH can send it.
			w.c.foreign.Add(1)
			continue
		}
		return t, nil
	}
}

// parseTransition reads "from to generation at open_until reason" (publish
// in lib.lua), or the same after "caused <cause> " (cause.lua), and reports
// whether payload is one.
func parseTransition(scope, payload string) (coordinator.Transition, bool) {
	cause := ""
	if rest, ok := strings.CutPrefix(payload, "caused "); ok {
		cause, payload, _ = strings.Cut(rest, " ")
		if coordinator.CheckCause(cause) != nil {
			return coordinator.Transition{}, false
		}
	}
	t, ok := parseMove(scope, payload)
	t.Cause = cause
	return t, ok
}

// parseMove reads "from to generation at open_until reason".
func parseMove(scope, payload string) (coordinator.Transition, bool) {
	f := strings.SplitN(payload, " ", 6)
	if len(f) != 6 {
		return coordinator.Transition{}, false
	}
	var n [5]int64
	for i := range n {
		v, err := strconv.ParseInt(f[i], 10, 64)
		if err != nil || v < 0 || i < 2 && v > int64(coordinator.StateDisabled) {
			return coordinator.Transition{}, false
		}
		n[i] = v
	}
	return newTransition(scope, n[0], n[1], uint64(n[2]), n[3], n[4], f[5]), true
}

// IgnoredMessages counts the messages that the Watches of c heard on a
// followed channel and ignored because no script of this module published
// them: a transition that does not parse, or an override change with no
// version. Anyone with PUBLISH on the server can send such a message;
// ignoring it keeps the feed, and a count above zero says someone does.
func (c *Coordinator) IgnoredMessages() uint64 { return c.foreign.Load() }

// Close waits for the heartbeat in flight, if any: over a server that
// stopped answering, up to the client's ReadTimeout when the client ignores
// context deadlines (no ContextTimeoutEnabled).
func (w *watch) Close() error {
	w.fail(errWatchClosed)
	w.mu.Lock()
	var errs []error
	for node, s := range w.subs {
		errs = append(errs, s.ps.Close())
		delete(w.subs, node)
	}
	w.mu.Unlock()
	w.wg.Wait()
	return errors.Join(errs...)
}
