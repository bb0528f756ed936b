package cbgrpc

import (
	"fmt"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel"

	"github.com/cbgrpc/cbgrpc/coordinator"
)

// notifyQueue bounds the transitions waiting for the callback. Transitions
// are few (a handful per scope per open period), so a full queue means a
// callback that is stuck, and waiting for it would stall the feed or a
// call.
const notifyQueue = 1024

// notifyRecent is how many transitions the notifier remembers, to pass a
// transition learned twice once: its answer and its echo on the feed come
// within a few milliseconds of each other.
const notifyRecent = 256

// notifier hands the transitions this process learns of to the user's
// callback ([WithOnTransition]) in a goroutine of its own: the callback
// runs off the calls' path, one transition at a time, and a callback that
// panics does not take the process down. A nil notifier (no callback)
// does nothing.
type notifier struct {
	f     func(coordinator.Transition)
	queue chan coordinator.Transition
	quit  chan struct{}
	done  chan struct{} // closed when the loop has returned
	// drainBy is when the loop stops delivering what was queued before
	// Close; set by stop before quit is closed.
	drainBy time.Time
	// abandoned is set when Close gave up waiting: nothing more is
	// delivered.
	abandoned atomic.Bool
	recent    recent // owned by the loop
}

func newNotifier(f func(coordinator.Transition)) *notifier {
	if f == nil {
		return nil
	}
	n := &notifier{
		f:      f,
		queue:  make(chan coordinator.Transition, notifyQueue),
		quit:   make(chan struct{}),
		done:   make(chan struct{}),
		recent: recent{set: make(map[transitionKey]struct{}, notifyRecent)},
	}
	go n.loop()
	return n
}

// tell queues t for the callback; it never blocks.
func (n *notifier) tell(t coordinator.Transition) {
	if n == nil {
		return
	}
	select {
	case n.queue <- t:
	default:
		otel.Handle(fmt.Errorf("cbgrpc: WithOnTransition: the callback is %d transitions behind; dropped %s -> %s of %q in generation %d",
			notifyQueue, t.From, t.To, t.Scope, t.Generation))
	}
}

func (n *notifier) loop() {
	defer close(n.done)
	for {
		select {
		case t := <-n.queue:
			n.deliver(t)
		case <-n.quit:
			for {
				select {
				case t := <-n.queue:
					if time.Now().After(n.drainBy) {
						return
					}
					n.deliver(t)
				default:
					return
				}
			}
		}
	}
}

func (n *notifier) deliver(t coordinator.Transition) {
	if n.abandoned.Load() || n.recent.seen(t) {
		return
	}
	defer func() {
		if r := recover(); r != nil {
			otel.Handle(fmt.Errorf("cbgrpc: the WithOnTransition callback panicked on %s -> %s of %q in generation %d: %v",
				t.From, t.To, t.Scope, t.Generation, r))
		}
	}()
	n.f(t)
}

// stop delivers what is queued, until deadline, and reports whether the
// loop returned by then. The Breaker stops everything that learns
// transitions first.
func (n *notifier) stop(deadline time.Time) bool {
	if n == nil {
		return true
	}
	n.drainBy = deadline
	close(n.quit)
	t := time.NewTimer(time.Until(deadline))
	defer t.Stop()
	select {
	case <-n.done:
		return true
	case <-t.C:
		n.abandoned.Store(true)
		return false
	}
}

// transitionKey tells one transition from another: an answer and the
// feed report the same transition with the same coordinator time.
type transitionKey struct {
	scope   string
	replica string
	gen     uint64
	to      coordinator.State
	at      int64
}

// recent is the last notifyRecent transitions delivered.
type recent struct {
	keys [notifyRecent]transitionKey
	next int
	set  map[transitionKey]struct{}
}

// seen reports whether t is among the recent transitions, and remembers it
// if not.
func (r *recent) seen(t coordinator.Transition) bool {
	k := transitionKey{scope: t.Scope, replica: t.Replica, gen: t.Generation, to: t.To, at: t.At.UnixMilli()}
	if _, ok := r.set[k]; ok {
		return true
	}
	delete(r.set, r.keys[r.next])
	r.keys[r.next] = k
	r.next = (r.next + 1) % len(r.keys)
	r.set[k] = struct{}{}
	return false
}
