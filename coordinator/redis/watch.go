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
// followed scope. A broken connection ends the Watch with
// [coordinator.ErrFeedLost]: go-redis would resubscribe on its own, but
// what was published meanwhile is gone.
func (c *Coordinator) Watch(ctx context.Context) (coordinator.Watch, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("redis coordinator: watch: %w", err)
	}
	return &watch{
		c:       c,
		scopes:  make(map[string]string),
		subs:    make(map[string]*goredis.PubSub),
		pending: make(map[string]chan struct{}),
		msgs:    make(chan *goredis.Message, 256),
		done:    make(chan struct{}),
	}, nil
}

type watch struct {
	c    *Coordinator
	msgs chan *goredis.Message
	done chan struct{} // closed by Close or by the first broken subscription

	mu      sync.Mutex
	scopes  map[string]string          // channel -> scope
	subs    map[string]*goredis.PubSub // node address ("" on a single server) -> subscription
	pending map[string]chan struct{}   // channel -> closed when Redis confirms the subscription
	err     error                      // why done was closed
	wg      sync.WaitGroup
}

var errWatchClosed = errors.New("redis coordinator: watch closed")

func (w *watch) Follow(ctx context.Context, scopes ...string) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err != nil {
		return w.err
	}
	for _, scope := range scopes {
		ch := scopeKeys(w.c.prefix, scope)[4]
		if _, ok := w.scopes[ch]; ok {
			continue
		}
		if err := w.subscribe(ctx, ch); err != nil {
			return fmt.Errorf("redis coordinator: watch %s: %w", abbreviate(scope), err)
		}
		w.scopes[ch] = scope
	}
	return nil
}

// subscribe adds ch to the subscription of the node that owns it, making
// that subscription if needed, and returns once Redis confirmed it, so
// that a transition published afterwards cannot be missed. w.mu is held
// on entry and on return.
func (w *watch) subscribe(ctx context.Context, ch string) error {
	node := ""
	var cc *goredis.ClusterClient
	if w.c.sharded {
		cc = w.c.client.(*goredis.ClusterClient)
		master, err := cc.MasterForKey(ctx, ch)
		if err != nil {
			return err
		}
		node = master.Options().Addr
	}
	acked := make(chan struct{})
	w.pending[ch] = acked
	defer delete(w.pending, ch)

	ps, ok := w.subs[node]
	switch {
	case ok && cc != nil:
		if err := ps.SSubscribe(ctx, ch); err != nil {
			return err
		}
	case ok:
		if err := ps.Subscribe(ctx, ch); err != nil {
			return err
		}
	default:
		// The channel goes with the new subscription: a sharded one
		// connects to the node that owns its first channel.
		if cc != nil {
			ps = cc.SSubscribe(ctx, ch)
		} else {
			ps = w.c.client.Subscribe(ctx, ch)
		}
		w.subs[node] = ps
		w.wg.Add(1)
		go w.read(ps)
	}

	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	w.mu.Unlock()
	defer w.mu.Lock()
	select {
	case <-acked:
		return nil
	case <-w.done:
		return errors.New("the subscription broke before Redis confirmed it")
	case <-ctx.Done():
		return fmt.Errorf("waiting for Redis to confirm the subscription: %w", ctx.Err())
	}
}

// read forwards the messages of one subscription until it breaks.
func (w *watch) read(ps *goredis.PubSub) {
	defer w.wg.Done()
	for {
		msg, err := ps.Receive(context.Background())
		if err != nil {
			w.fail(fmt.Errorf("redis coordinator: watch: %v: %w", err, coordinator.ErrFeedLost))
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
			w.mu.Lock()
			err := w.err
			w.mu.Unlock()
			return coordinator.Transition{}, err
		case <-ctx.Done():
			return coordinator.Transition{}, ctx.Err()
		}
		w.mu.Lock()
		scope, ok := w.scopes[m.Channel]
		w.mu.Unlock()
		if !ok {
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

// parseTransition reads "from to generation at reason" (see lib.lua).
func parseTransition(scope, payload string) (coordinator.Transition, error) {
	f := strings.SplitN(payload, " ", 5)
	if len(f) != 5 {
		return coordinator.Transition{}, fmt.Errorf("malformed transition %q", payload)
	}
	var n [4]int64
	for i := range n {
		v, err := strconv.ParseInt(f[i], 10, 64)
		if err != nil || v < 0 {
			return coordinator.Transition{}, fmt.Errorf("malformed transition %q", payload)
		}
		n[i] = v
	}
	return coordinator.Transition{
		Scope:      scope,
		From:       coordinator.State(n[0]),
		To:         coordinator.State(n[1]),
		Generation: uint64(n[2]),
		At:         time.UnixMilli(n[3]),
		Reason:     f[4],
	}, nil
}

func (w *watch) Close() error {
	w.fail(errWatchClosed)
	w.mu.Lock()
	var errs []error
	for node, ps := range w.subs {
		errs = append(errs, ps.Close())
		delete(w.subs, node)
	}
	w.mu.Unlock()
	w.wg.Wait()
	return errors.Join(errs...)
}
