package memory

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/cbgrpc/cbgrpc/coordinator"
)

// feedBuffer is how many transitions a subscription holds for a slow
// reader before it is declared lost.
const feedBuffer = 1024

var _ coordinator.Watcher = (*Coordinator)(nil)

// Watch implements [coordinator.Watcher]: the subscription receives every
// transition of the scopes it follows, made by any caller of c.
func (c *Coordinator) Watch(ctx context.Context) (coordinator.Watch, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("memory coordinator: watch: %w", err)
	}
	w := &watch{c: c, ch: make(chan delivery, feedBuffer), done: make(chan struct{})}
	c.mu.Lock()
	if c.watches == nil {
		c.watches = make(map[*watch]struct{})
	}
	c.watches[w] = struct{}{}
	c.mu.Unlock()
	return w, nil
}

// publish hands t to every subscription following its scope. It never
// blocks: a subscription whose buffer is full is lost instead. c.mu is held.
func (c *Coordinator) publish(t *coordinator.Transition) {
	for w := range c.watches {
		w.mu.Lock()
		if f := w.scopes[t.Scope]; f != 0 && !w.lost {
			select {
			case w.ch <- delivery{*t, f}:
			default:
				w.lost = true
				close(w.done)
			}
		}
		w.mu.Unlock()
	}
}

// publishPolicy tells every subscription that follows policies of a change
// of the fleet default, or of a scope it follows. c.mu is held.
func (c *Coordinator) publishPolicy(ch coordinator.PolicyChange) {
	for w := range c.watches {
		w.mu.Lock()
		f := w.policies
		if f != nil && !w.lost && !w.closed && (ch.Target.Fleet || w.scopes[ch.Target.Scope] != 0) {
			f(ch)
		}
		w.mu.Unlock()
	}
}

var _ coordinator.PolicyWatch = (*watch)(nil)

// FollowPolicies implements [coordinator.PolicyWatch]. f runs with the
// coordinator's lock held: it must not call the coordinator.
func (w *watch) FollowPolicies(ctx context.Context, f func(coordinator.PolicyChange)) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return errWatchClosed
	}
	w.policies = f
	return nil
}

type watch struct {
	c    *Coordinator
	ch   chan delivery
	done chan struct{} // closed when lost or closed

	mu sync.Mutex
	// scopes maps each followed scope to the Follow that added it, so that
	// a transition published before an Unfollow is dropped even when the
	// scope is followed again before Next reads it.
	scopes  map[string]uint64
	follows uint64
	// policies hears the changes of overrides (FollowPolicies).
	policies func(coordinator.PolicyChange)
	lost     bool
	closed   bool
}

// delivery is a transition on its way to the reader, with the Follow it
// was published under.
type delivery struct {
	t      coordinator.Transition
	follow uint64
}

var errWatchClosed = errors.New("memory coordinator: watch closed")

func (w *watch) Follow(ctx context.Context, scopes ...string) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return errWatchClosed
	}
	if w.scopes == nil {
		w.scopes = make(map[string]uint64, len(scopes))
	}
	for _, s := range scopes {
		if w.scopes[s] == 0 {
			w.follows++
			w.scopes[s] = w.follows
		}
	}
	return nil
}

func (w *watch) Unfollow(ctx context.Context, scopes ...string) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return errWatchClosed
	}
	for _, s := range scopes {
		delete(w.scopes, s)
	}
	return nil
}

func (w *watch) Next(ctx context.Context) (coordinator.Transition, error) {
	for {
		d, err := w.next(ctx)
		if err != nil || w.current(d) {
			return d.t, err
		}
		// Published before its scope was unfollowed.
	}
}

// current reports whether d's scope is still followed by the Follow that
// d was published under.
func (w *watch) current(d delivery) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.scopes[d.t.Scope] == d.follow
}

func (w *watch) next(ctx context.Context) (delivery, error) {
	// Deliver what was published before a loss or close first, in order.
	select {
	case d := <-w.ch:
		return d, nil
	default:
	}
	select {
	case d := <-w.ch:
		return d, nil
	case <-w.done:
		w.mu.Lock()
		defer w.mu.Unlock()
		if w.closed {
			return delivery{}, errWatchClosed
		}
		return delivery{}, fmt.Errorf("memory coordinator: reader fell %d transitions behind: %w", feedBuffer, coordinator.ErrFeedLost)
	case <-ctx.Done():
		return delivery{}, ctx.Err()
	}
}

func (w *watch) Close() error {
	w.c.mu.Lock()
	delete(w.c.watches, w)
	w.c.mu.Unlock()
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.closed {
		w.closed = true
		if !w.lost {
			close(w.done)
		}
	}
	return nil
}
