package cbgrpc

import (
	"context"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/cbgrpc/cbgrpc/coordinator"
)

// maxBatch caps the outcomes of one Record, so that a scope that piled up
// outcomes while its Record was slow sends them in calls of bounded size.
const maxBatch = 512

// item is one outcome waiting for the recorder: an outcome of an allowed
// call (Record) or a probe's settlement (Settle, when claim is set).
type item struct {
	scope   string
	claim   string
	outcome coordinator.Outcome
	caller  trace.SpanContext // the call's span, to parent or link transition spans
}

// batch is what the recorder holds for one scope.
type batch struct {
	outcomes []coordinator.Outcome
	links    []trace.Link
	urgent   bool // holds a failure: send as soon as nothing is in flight
	inflight bool // a Record of this scope is running
}

// recorder delivers outcomes off the calls' path. Outcomes go through a
// bounded queue to one goroutine that sends them with Record as a group
// commit: at most one Record in flight per scope, the next batch
// accumulating meanwhile. A failure is sent as soon as the previous Record
// returns, so it reaches the coordinator within about one round trip
// however busy the scope; successes alone wait up to the record interval.
// Nothing is retried beyond the one retry of a transport error: an outcome
// that cannot be delivered is dropped and counted.
type recorder struct {
	b *Breaker
	// mu orders add against stop: an outcome is queued before stop marks
	// the recorder closed, and then flushed, or it is counted dropped.
	mu     sync.RWMutex
	closed bool
	queue  chan item
	done   chan string // scope whose Record returned
	quit   chan struct{}
	// stopped is closed when the loop has returned.
	stopped chan struct{}
	// wg counts the loop and every goroutine it started. Only they add to
	// it, so Close can wait on it without racing an Add.
	wg sync.WaitGroup

	batches map[string]*batch // owned by the loop
	flushBy time.Time         // set by stop before quit is closed
}

func newRecorder(b *Breaker) *recorder {
	r := &recorder{
		b:       b,
		queue:   make(chan item, b.cfg.queueSize),
		done:    make(chan string),
		quit:    make(chan struct{}),
		stopped: make(chan struct{}),
		batches: make(map[string]*batch),
	}
	r.wg.Add(1)
	go r.loop()
	return r
}

// add queues an outcome; it never blocks the call.
func (r *recorder) add(it item) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if testHookRecorderAdd != nil {
		testHookRecorderAdd()
	}
	if r.closed {
		r.b.tel.drop(it.scope, dropClosed, 1)
		return
	}
	select {
	case r.queue <- it:
	default:
		r.b.tel.drop(it.scope, dropQueueFull, 1)
	}
}

// testHookRecorderAdd, when set by a test, runs inside add, to interleave
// an outcome with Close.
var testHookRecorderAdd func()

func (r *recorder) loop() {
	defer r.wg.Done()
	defer close(r.stopped)
	tick := time.NewTicker(r.b.cfg.recordInterval)
	defer tick.Stop()
	for {
		select {
		case it := <-r.queue:
			r.take(it)
		case scope := <-r.done:
			r.returned(scope)
		case <-tick.C:
			for scope, bt := range r.batches {
				switch {
				case bt.inflight:
				case len(bt.outcomes) > 0:
					r.send(scope, bt)
				default:
					delete(r.batches, scope) // idle: forget it
				}
			}
		case <-r.quit:
			r.flush()
			return
		}
	}
}

func (r *recorder) take(it item) {
	if it.claim != "" {
		r.settle(it)
		return
	}
	bt := r.batches[it.scope]
	if bt == nil {
		bt = &batch{}
		r.batches[it.scope] = bt
	}
	if len(bt.outcomes) >= r.b.cfg.queueSize {
		r.b.tel.drop(it.scope, dropQueueFull, 1)
		return
	}
	bt.outcomes = append(bt.outcomes, it.outcome)
	if it.caller.IsValid() && len(bt.links) < maxLinks {
		bt.links = append(bt.links, trace.Link{SpanContext: it.caller})
	}
	if it.outcome.Failure {
		bt.urgent = true
	}
	if bt.urgent && !bt.inflight {
		r.send(it.scope, bt)
	}
}

func (r *recorder) returned(scope string) {
	bt := r.batches[scope]
	if bt == nil {
		return
	}
	bt.inflight = false
	if bt.urgent && len(bt.outcomes) > 0 {
		r.send(scope, bt)
	}
}

// send starts a Record of the scope's pending outcomes.
func (r *recorder) send(scope string, bt *batch) {
	n := min(len(bt.outcomes), maxBatch)
	outcomes := make([]coordinator.Outcome, n)
	copy(outcomes, bt.outcomes)
	bt.outcomes = append(bt.outcomes[:0], bt.outcomes[n:]...)
	links := bt.links
	bt.links = nil
	bt.urgent = false
	for _, o := range bt.outcomes {
		if o.Failure {
			bt.urgent = true
			break
		}
	}
	bt.inflight = true

	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		r.record(scope, outcomes, links)
		select {
		case r.done <- scope:
		case <-r.stopped:
		}
	}()
}

func (r *recorder) record(scope string, outcomes []coordinator.Outcome, links []trace.Link) {
	b := r.b
	if b.health.inBackoff() {
		b.tel.drop(scope, dropBackoff, len(outcomes))
		return
	}
	// The same ID on the retry: a Record that did land before its answer
	// was lost then counts once.
	ctx := coordinator.WithBatchID(context.Background(), b.ids.next())
	_, err := b.roundTrip(ctx, trip{op: "record", scope: scope, timeout: b.cfg.timeout, wg: &r.wg, links: links},
		func(ctx context.Context) (answer, error) {
			res, err := b.c.Record(ctx, scope, b.cfg.policy, outcomes)
			return resulted(res), err
		})
	if err != nil {
		b.tel.drop(scope, dropCoordinator, len(outcomes))
	}
}

// settle reports a probe's outcome, in its own goroutine: probes are few
// (Policy.Probes fleet-wide) and each one decides recovery, so they do not
// wait for a batch. A settlement that cannot be delivered is dropped: the
// probe's lease frees its slot.
func (r *recorder) settle(it item) {
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		b := r.b
		if b.health.inBackoff() {
			b.tel.drop(it.scope, dropBackoff, 1)
			return
		}
		// The probe causes what its settlement does: a transition span is
		// the probe call's child.
		probe := trace.ContextWithSpanContext(context.Background(), it.caller)
		_, err := b.roundTrip(context.Background(), trip{op: "settle", scope: it.scope, timeout: b.cfg.timeout, wg: &r.wg, span: probe},
			func(ctx context.Context) (answer, error) {
				res, err := b.c.Settle(ctx, it.scope, b.cfg.policy, it.claim, it.outcome)
				return resulted(res), err
			})
		if err != nil {
			b.tel.drop(it.scope, dropCoordinator, 1)
		}
	}()
}

// stop flushes what is pending and waits for every goroutine of the
// recorder, until deadline. It reports whether all of them returned.
func (r *recorder) stop(deadline time.Time) bool {
	r.flushBy = deadline
	// Every add that saw the recorder open has queued its outcome once
	// this lock is held: flush finds it.
	r.mu.Lock()
	r.closed = true
	r.mu.Unlock()
	close(r.quit)
	return waitUntil(&r.wg, deadline)
}

// flush sends everything still queued or pending, each scope's batches one
// after another, until r.flushBy; what is left then is dropped and counted.
func (r *recorder) flush() {
	for {
		select {
		case it := <-r.queue:
			r.take(it)
			continue
		default:
		}
		break
	}
	timer := time.NewTimer(time.Until(r.flushBy))
	defer timer.Stop()
	for {
		busy := false
		for scope, bt := range r.batches {
			if !bt.inflight && len(bt.outcomes) > 0 {
				r.send(scope, bt)
			}
			busy = busy || bt.inflight
		}
		if !busy {
			return
		}
		select {
		case scope := <-r.done:
			if bt := r.batches[scope]; bt != nil {
				bt.inflight = false
			}
		case <-timer.C:
			for scope, bt := range r.batches {
				if n := len(bt.outcomes); n > 0 {
					r.b.tel.drop(scope, dropClosed, n)
				}
			}
			return
		}
	}
}
