package redis

import (
	"context"
	"errors"
	"fmt"
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
// what was published meanwhile is gone.
func (c *Coordinator) Watch(ctx context.Context) (coordinator.Watch, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("redis coordinator: watch: %w", err)
	}
	return &watch{
		c:       c,
		scopes:  make(map[string]string),
		nodes:   make(map[string]string),
		subs:    make(map[string]*sub),
		pending: make(map[string]chan struct{}),
		msgs:    make(chan *goredis.Message, 256),
		done:    make(chan struct{}),
	}, nil
}

type watch struct {
	c    *Coordinator
	msgs chan *goredis.Message
	done chan struct{} // closed by Close or by the first broken subscription

	// following serialises Follow and Unfollow, which wait for Redis
	// while not holding mu.
	following sync.Mutex

	mu      sync.Mutex
	scopes  map[string]string        // channel -> scope, of the followed scopes
	nodes   map[string]string        // channel -> node of the subscription it is on
	subs    map[string]*sub          // node address ("" on a single server) -> its subscription
	pending map[string]chan struct{} // channel -> closed when Redis confirms the subscription
	err     error                    // why done was closed
	wg      sync.WaitGroup
}

// sub is one subscription: a connection to one node.
type sub struct {
	ps       *goredis.PubSub
	channels int  // channels followed on it, or being followed
	closed   bool // closed because it follows nothing more: its reader ends quietly
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
	if w.c.sharded {
		master, err := cc.MasterForKey(ctx, ch)
		if err != nil {
			return err
		}
		node = master.Options().Addr
	}
	acked := make(chan struct{})
	w.mu.Lock()
	w.pending[ch] = acked
	s := w.subs[node]
	w.mu.Unlock()
	defer func() {
		w.mu.Lock()
		delete(w.pending, ch)
		w.mu.Unlock()
	}()

	var err error
	switch {
	case s == nil:
		// The channel goes with the new subscription: a sharded one
		// connects to the node that owns its first channel.
		s = &sub{}
		if w.c.sharded {
			s.ps = cc.SSubscribe(ctx, ch)
		} else {
			s.ps = w.c.client.Subscribe(ctx, ch)
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
	case w.c.sharded:
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
	case <-w.done:
		return errors.New("the subscription broke before Redis confirmed it")
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
	}
	w.mu.Unlock()
	switch {
	case s.closed:
		return s.ps.Close()
	case w.c.sharded:
		return s.ps.SUnsubscribe(ctx, ch)
	default:
		return s.ps.Unsubscribe(ctx, ch)
	}
}

// read forwards the messages of one subscription until it breaks, or
// until Unfollow closes it.
func (w *watch) read(s *sub) {
	defer w.wg.Done()
	for {
		msg, err := s.ps.Receive(context.Background())
		if err != nil {
			w.mu.Lock()
			quiet := s.closed
			w.mu.Unlock()
			if !quiet {
				w.fail(fmt.Errorf("redis coordinator: watch: %v: %w", err, coordinator.ErrFeedLost))
			}
			return
		}
		switch m := msg.(type) {
		case *goredis.Message:
			select {
			case w.msgs <- m:
			case <-w.done:
				return
			}
		case *goredis.Subscription:
			if m.Kind != "subscribe" && m.Kind != "ssubscribe" {
				continue
			}
			w.mu.Lock()
			if acked, ok := w.pending[m.Channel]; ok {
				close(acked)
				delete(w.pending, m.Channel)
			}
			w.mu.Unlock()
		}
	}
}

// fail ends the Watch with err, unless it has ended already.
func (w *watch) fail(err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err == nil {
		w.err = err
		close(w.done)
	}
}

func (w *watch) Next(ctx context.Context) (coordinator.Transition, error) {
	for {
		var m *goredis.Message
		select {
		case m = <-w.msgs:
		case <-w.done:
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
		t, err := parseTransition(scope, m.Payload)
		if err != nil {
			err = fmt.Errorf("redis coordinator: watch %s: %v: %w", abbreviate(scope), err, coordinator.ErrFeedLost)
			w.fail(err)
			return coordinator.Transition{}, err
		}
		return t, nil
	}
}

// parseTransition reads "from to generation at open_until reason" (publish
// in lib.lua).
func parseTransition(scope, payload string) (coordinator.Transition, error) {
	f := strings.SplitN(payload, " ", 6)
	if len(f) != 6 {
		return coordinator.Transition{}, fmt.Errorf("malformed transition %q", payload)
	}
	var n [5]int64
	for i := range n {
		v, err := strconv.ParseInt(f[i], 10, 64)
		if err != nil || v < 0 {
			return coordinator.Transition{}, fmt.Errorf("malformed transition %q", payload)
		}
		n[i] = v
	}
	return newTransition(scope, n[0], n[1], uint64(n[2]), n[3], n[4], f[5]), nil
}

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
