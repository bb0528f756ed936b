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
	"go.opentelemetry.io/otel/attribute"

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
	}, func(coordinator.Transition, bool) {}, time.Second)
	defer n.stop(time.Now().Add(closeTimeout))
	tell := func(i int) {
		n.tell(coordinator.Transition{Scope: fmt.Sprint("s", i), To: open, Generation: 1}, false)
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

// cbgrpc.transitions counts what each process learned, once: the replica
// whose call tripped the scope counts it caused, with the feed's echo of it
// not counted again; a replica that heard it on the feed counts it too,
// not caused.
func TestTransitionsCountedAsLearned(t *testing.T) {
	m := memory.New()
	tripped, heard := newMetrics(), newMetrics()
	tripper := newBreaker(t, m, WithPolicy(tripPolicy()), WithMeterProvider(tripped.mp))
	listener := newBreaker(t, m, WithPolicy(tripPolicy()), WithMeterProvider(heard.mp))
	const scope = "learned"
	for _, b := range []*Breaker{tripper, listener} {
		admitN(t, b, scope, 1)
		eventually(t, "the feed follows the scope", func() bool { return followed(b, scope) })
	}
	tk, err := admitCall(tripper, context.Background(), &call{scope: scope, method: testMethod})
	if err != nil {
		t.Fatal(err)
	}
	tripper.finish(context.Background(), tk, errTransport)

	trip := []attribute.KeyValue{attrFrom.String("closed"), attrTo.String("open")}
	eventually(t, "the listener counts the trip it heard", func() bool {
		return heard.sum(t, "cbgrpc.transitions", append(trip, attrCaused.Bool(false))...) == 1
	})
	eventually(t, "the tripper counts the trip it caused", func() bool {
		return tripped.sum(t, "cbgrpc.transitions", append(trip, attrCaused.Bool(true))...) == 1
	})
	// By the time the listener heard it, the tripper's feed has as a rule
	// told the tripper too.
	if n, caused := tripped.sum(t, "cbgrpc.transitions"), tripped.sum(t, "cbgrpc.transitions", attrCaused.Bool(true)); n != 1 || caused != 1 {
		t.Errorf("the tripper counted %d transitions, %d caused; want its trip once, caused", n, caused)
	}
	if n := heard.sum(t, "cbgrpc.transitions"); n != 1 {
		t.Errorf("the listener counted %d transitions, want the trip once", n)
	}
}

// A process's own transition can reach it on the feed before the answer
// to its call does: it is still counted once, caused. One only heard is
// counted not caused once the grace is over, or at once when the Breaker
// stops.
func TestTransitionHeardBeforeItsAnswerCountsCaused(t *testing.T) {
	var mu sync.Mutex
	var counted []bool
	count := func(_ coordinator.Transition, caused bool) {
		mu.Lock()
		defer mu.Unlock()
		counted = append(counted, caused)
	}
	got := func() []bool {
		mu.Lock()
		defer mu.Unlock()
		return append([]bool(nil), counted...)
	}
	own := coordinator.Transition{Scope: "own", From: closed, To: open, Generation: 2, At: time.Now()}
	n := newNotifier(nil, count, time.Hour)
	n.heardOnFeed(own)
	n.tell(own, true)
	n.heardOnFeed(own)
	if c := got(); len(c) != 1 || !c[0] {
		t.Fatalf("counted %v; want once, caused", c)
	}
	other := coordinator.Transition{Scope: "other", From: closed, To: open, Generation: 2, At: time.Now()}
	n.heardOnFeed(other)
	if c := got(); len(c) != 1 {
		t.Fatalf("counted %v before the grace is over; want the first alone", c)
	}
	n.stop(time.Now().Add(closeTimeout))
	if c := got(); len(c) != 2 || c[1] {
		t.Fatalf("counted %v after stop; want the one heard, not caused", c)
	}

	short := newNotifier(nil, count, time.Millisecond)
	defer short.stop(time.Now().Add(closeTimeout))
	short.heardOnFeed(other)
	eventually(t, "the heard transition counted after the grace", func() bool { return len(got()) == 3 })
	if c := got(); c[2] {
		t.Errorf("counted %v; want the heard one not caused", c)
	}
}
