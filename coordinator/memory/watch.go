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
	w := &watch{c: c, ch: make(chan coordinator.Transition, feedBuffer), done: make(chan struct{})}
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
		if w.scopes[t.Scope] && !w.lost {
			select {
			case w.ch <- *t:
			default:
				w.lost = true
				close(w.done)
			}
		}
		w.mu.Unlock()
	}
}

type watch struct {
	c    *Coordinator
	ch   chan coordinator.Transition
	done chan struct{} // closed when lost or closed

	mu     sync.Mutex
	scopes map[string]bool
	lost   bool
	closed bool
}

var errWatchClosed = errors.New("memory coordinator: watch closed")

func (w *watch) Follow(ctx context.Context, scopes ...string) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return errWatchClosed
	}
	if w.scopes == nil {
		w.scopes = make(map[string]bool, len(scopes))
	}
	for _, s := range scopes {
		w.scopes[s] = true
	}
	return nil
}

func (w *watch) Next(ctx context.Context) (coordinator.Transition, error) {
	// Deliver what was published before a loss or close first, in order.
	select {
	case t := <-w.ch:
		return t, nil
	default:
	}
	select {
	case t := <-w.ch:
		return t, nil
	case <-w.done:
		w.mu.Lock()
		defer w.mu.Unlock()
		if w.closed {
			return coordinator.Transition{}, errWatchClosed
		}
		return coordinator.Transition{}, fmt.Errorf("memory coordinator: reader fell %d transitions behind: %w", feedBuffer, coordinator.ErrFeedLost)
	case <-ctx.Done():
		return coordinator.Transition{}, ctx.Err()
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
