package cbgrpc

import (
	"context"
	"fmt"
	"log"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/otel"

	"github.com/cbgrpc/cbgrpc/coordinator"
	"github.com/cbgrpc/cbgrpc/coordinator/coordinatortest"
	"github.com/cbgrpc/cbgrpc/coordinator/memory"
)

// transitionLog is a WithOnTransition callback that keeps what it is told.
type transitionLog struct {
	mu  sync.Mutex
	got []coordinator.Transition
}

func (l *transitionLog) add(t coordinator.Transition) {
	l.mu.Lock()
	l.got = append(l.got, t)
	l.mu.Unlock()
}

// count returns how many times the log holds scope's transition to to.
func (l *transitionLog) count(scope string, to coordinator.State) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, t := range l.got {
		if t.Scope == scope && t.To == to {
			n++
		}
	}
	return n
}

func (l *transitionLog) len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.got)
}

// otelErrors captures what is reported to otel.Handle during the test.
func otelErrors(t *testing.T) func() []error {
	var mu sync.Mutex
	var errs []error
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
		mu.Lock()
		errs = append(errs, err)
		mu.Unlock()
	}))
	t.Cleanup(func() { otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) { log.Print(err) })) })
	return func() []error {
		mu.Lock()
		defer mu.Unlock()
		return append([]error(nil), errs...)
	}
}

// The callback is told of the transitions this process makes (here a trip
// by its own Record), those the feed brings from the rest of the fleet,
// and operators' commands through the Breaker. A transition learned both
// from an answer and from the feed is passed once.
func TestOnTransitionSeesOwnFeedAndOperatorTransitions(t *testing.T) {
	for _, kind := range everyCoordinator[:2] {
		t.Run(kind.name, func(t *testing.T) {
			testOnTransitionSeesOwnFeedAndOperatorTransitions(t, kind.make(t, coordinatortest.NewClock()))
		})
	}
}

func testOnTransitionSeesOwnFeedAndOperatorTransitions(t *testing.T, m coordinator.Coordinator) {
	p := tripPolicy()
	var log transitionLog
	b := newBreaker(t, m, WithPolicy(p), WithOnTransition(log.add))
	ctx := context.Background()
	for _, scope := range []string{"own", "fleet"} {
		admitN(t, b, scope, 1)
		eventually(t, "the feed follows "+scope, func() bool { return followed(b, scope) })
	}

	tk, err := admitCall(b, ctx, &call{scope: "own", method: testMethod})
	if err != nil {
		t.Fatal(err)
	}
	b.finish(ctx, tk, errTransport)
	eventually(t, "this process's trip", func() bool { return log.count("own", open) > 0 })

	// Another replica trips "fleet": this process hears of it on the feed,
	// after the echo of its own trip.
	tripScope(t, m, "fleet", p)
	eventually(t, "the fleet's trip", func() bool { return log.count("fleet", open) == 1 })
	if n := log.count("own", open); n != 1 {
		t.Errorf("this process's trip, learned from its Record and from the feed, passed %d times; want once", n)
	}

	if _, err := b.Isolate(ctx, "operator", coordinator.Note{By: "alice", Reason: "INC-1"}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the operator's isolation", func() bool { return log.count("operator", isolated) == 1 })
}

// Close passes the transitions still queued to the callback and returns
// after the last call; nothing comes after it.
func TestOnTransitionNothingAfterClose(t *testing.T) {
	gate := make(chan struct{})
	var returned, late atomic.Bool
	var log transitionLog
	b := newBreaker(t, memory.New(), WithOnTransition(func(tr coordinator.Transition) {
		if returned.Load() {
			late.Store(true)
		}
		<-gate
		log.add(tr)
	}))
	ctx := context.Background()
	for i := range 3 {
		if _, err := b.Isolate(ctx, fmt.Sprint("scope-", i), coordinator.Note{Reason: "test"}); err != nil {
			t.Fatal(err)
		}
	}

	closed := make(chan error)
	go func() { closed <- b.Close() }()
	eventually(t, "Close to start", func() bool {
		b.mu.RLock()
		defer b.mu.RUnlock()
		return b.closed.Load()
	})
	close(gate)
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	returned.Store(true)
	if n := log.len(); n != 3 {
		t.Errorf("%d transitions passed by the time Close returned; want the 3 queued", n)
	}
	if _, err := b.Isolate(ctx, "after", coordinator.Note{Reason: "test"}); err != ErrShut {
		t.Errorf("Isolate after Close: %v; want ErrShut", err)
	}
	if late.Load() || log.len() != 3 {
		t.Error("the callback was called after Close returned")
	}
}

// A callback that panics is recovered and reported to otel.Handle; the
// next transitions are still passed.
func TestOnTransitionPanicRecovered(t *testing.T) {
	reported := otelErrors(t)
	var log transitionLog
	b := newBreaker(t, memory.New(), WithOnTransition(func(tr coordinator.Transition) {
		log.add(tr)
		if tr.Scope == "panics" {
			panic("callback bug")
		}
	}))
	ctx := context.Background()
	for _, scope := range []string{"panics", "next"} {
		if _, err := b.Isolate(ctx, scope, coordinator.Note{Reason: "test"}); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, "the transition after the panic", func() bool { return log.count("next", isolated) == 1 })
	var found bool
	for _, err := range reported() {
		found = found || strings.Contains(err.Error(), "callback bug") && strings.Contains(err.Error(), `"panics"`)
	}
	if !found {
		t.Errorf("otel.Handle got %v; want the panic, naming the scope", reported())
	}
}

// A callback that is stuck does not stall whoever learns transitions: past
// the queue, transitions are dropped and reported.
func TestNotifierDropsWhatAStuckCallbackCannotTake(t *testing.T) {
	reported := otelErrors(t)
	entered := make(chan struct{}, 1)
	gate := make(chan struct{})
	n := newNotifier(func(coordinator.Transition) {
		select {
		case entered <- struct{}{}:
		default:
		}
		<-gate
	})
	defer n.stop(time.Now().Add(closeTimeout))
	tell := func(i int) {
		n.tell(coordinator.Transition{Scope: fmt.Sprint("s", i), To: open, Generation: 1})
	}
	tell(0)
	<-entered
	for i := range notifyQueue {
		tell(i + 1)
	}
	if got := len(reported()); got != 0 {
		t.Fatalf("%d reported with the queue just full", got)
	}
	tell(notifyQueue + 1)
	if errs := reported(); len(errs) != 1 || !strings.Contains(errs[0].Error(), "behind") {
		t.Errorf("reported %v; want one drop", errs)
	}
	close(gate)
}
