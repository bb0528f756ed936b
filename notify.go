package cbgrpc

import (
	"fmt"
	"sync"
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

// notifier passes each transition this process learns of once, however
// many times it is told (an answer and the feed's echo of it), to count
// and to the user's callback ([WithOnTransition]). The callback runs in a
// goroutine of its own: off the calls' path, one transition at a time,
// and a callback that panics does not take the process down.
type notifier struct {
	f func(coordinator.Transition) // nil: no callback, and no goroutine
	// count counts a transition learned; caused: from the answer to this
	// process's own coordinator call.
	count func(t coordinator.Transition, caused bool)
	// grace is how long a transition heard on the feed waits to be counted
	// for the answer that may carry it: a process's own transition can
	// reach it on the feed before the answer to its call does, and a call
	// in flight answers within its timeout.
	grace time.Duration
	queue chan coordinator.Transition
	quit  chan struct{}
	done  chan struct{} // closed when the loop has returned
	// drainBy is when the loop stops delivering what was queued before
	// Close; set by stop before quit is closed.
	drainBy time.Time
	// abandoned is set when Close gave up waiting: nothing more is
	// delivered.
	abandoned atomic.Bool
	mu        sync.Mutex // guards recent and heard: whoever learns a transition tells
	recent    recent
	// heard holds the transitions heard on the feed not counted yet.
	heard map[transitionKey]*uncounted
}

// uncounted is a transition heard on the feed, and the timer that counts
// it once grace is over.
type uncounted struct {
	t     coordinator.Transition
	timer *time.Timer
}

func newNotifier(f func(coordinator.Transition), count func(coordinator.Transition, bool), grace time.Duration) *notifier {
	n := &notifier{f: f, count: count, grace: grace, recent: recent{set: make(map[transitionKey]struct{}, notifyRecent)},
		heard: make(map[transitionKey]*uncounted)}
	if f == nil {
		return n
	}
	n.queue = make(chan coordinator.Transition, notifyQueue)
	n.quit = make(chan struct{})
	n.done = make(chan struct{})
	go n.loop()
	return n
}

// tell passes t, unless told it before, to the callback, and counts it.
// caused: t came in the answer to this process's own coordinator call;
// heard on the feed, it is counted not caused once grace is over, unless
// the answer that carries it comes first. It never blocks.
func (n *notifier) tell(t coordinator.Transition, caused bool) {
	key := keyOf(t)
	n.mu.Lock()
	if u, ok := n.heard[key]; ok {
		if caused && u.timer.Stop() {
			// Heard on the feed first, and this process's own after all.
			delete(n.heard, key)
			n.count(t, true)
		}
		n.mu.Unlock()
		return
	}
	if n.recent.seen(key) {
		n.mu.Unlock()
		return
	}
	if caused {
		n.count(t, true)
	} else {
		n.heard[key] = &uncounted{t: t, timer: time.AfterFunc(n.grace, func() { n.countHeard(key) })}
	}
	n.mu.Unlock()
	if n.f == nil {
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

// heard tells t, heard on the feed.
func (n *notifier) heardOnFeed(t coordinator.Transition) { n.tell(t, false) }

// countHeard counts the transition of key, heard on the feed, as not
// caused, unless counted already.
func (n *notifier) countHeard(key transitionKey) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if u, ok := n.heard[key]; ok {
		delete(n.heard, key)
		n.count(u.t, false)
	}
}

func (n *notifier) deliver(t coordinator.Transition) {
	if n.abandoned.Load() {
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
	n.mu.Lock()
	// What the feed told waits no longer: nothing learns any more.
	for key, u := range n.heard {
		if u.timer.Stop() {
			delete(n.heard, key)
			n.count(u.t, false)
		}
	}
	n.mu.Unlock()
	if n.f == nil {
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

func keyOf(t coordinator.Transition) transitionKey {
	return transitionKey{scope: t.Scope, replica: t.Replica, gen: t.Generation, to: t.To, at: t.At.UnixMilli()}
}

// recent is the last notifyRecent transitions told.
type recent struct {
	keys [notifyRecent]transitionKey
	next int
	set  map[transitionKey]struct{}
}

// seen reports whether k is among the recent transitions, and remembers it
// if not.
func (r *recent) seen(k transitionKey) bool {
	if _, ok := r.set[k]; ok {
		return true
	}
	delete(r.set, r.keys[r.next])
	r.keys[r.next] = k
	r.next = (r.next + 1) % len(r.keys)
	r.set[k] = struct{}{}
	return false
}
