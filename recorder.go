package cbgrpc

import (
	"context"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/cbgrpc/cbgrpc/coordinator"
	"github.com/cbgrpc/cbgrpc/internal/health"
	"github.com/cbgrpc/cbgrpc/internal/instant"
)

// maxBatch caps a full batch (fullAt), the most outcomes one Record
// carries, so that a scope that piled up outcomes while its Record was
// slow sends them in calls of bounded size.
// A scope that gathers a full batch sends it without waiting for the
// record interval (see full): a replica's busy scope must not pile up
// more outcomes in one interval than the recorder holds, and with runs of
// equal outcomes sent as one (the Redis coordinator), a batch costs the
// coordinator about the same whatever its size.
const maxBatch = 2048

// item is one outcome waiting for the recorder: an outcome of an allowed
// call (Record) or a probe's settlement (Settle, when claim is set).
type item struct {
	scope   string
	claim   string
	outcome coordinator.Outcome
	caller  trace.SpanContext // the call's span, to parent or link transition spans
	urgent  bool              // an outlier's probe: it goes at once, as a failure does
	// at is when the call ended (an untimed one: began): the order in
	// which the outcomes of one scope, left in several shards, are taken.
	at instant.Time
	// verdict, when set, is released once the Record carrying the outcome
	// has returned, or the outcome was dropped (verdict.go).
	verdict *verdict
	// more is how many equal outcomes followed this one in its shard,
	// merged into it (waiting.go): the successes of a closed scope cost
	// an increment, not an item each.
	more int
	// mergeable: the outcome is plain, and the next equal one may merge
	// into it (set by add).
	mergeable bool
}

// plain reports whether it is an outcome that nothing but its count
// tells apart from the next equal one: untimed, untraced, no probe's,
// waiting for no verdict and not urgent.
func (it *item) plain() bool {
	return it.claim == "" && it.verdict == nil && !it.urgent && !it.caller.IsValid() &&
		!it.outcome.Failed() && it.outcome.Duration == 0
}

// batch is what the recorder holds for one scope.
type batch struct {
	outcomes []coordinator.Outcome
	// callers are the span contexts of the calls of outcomes, one each; nil
	// while none of them was traced.
	callers []trace.SpanContext
	urgent  bool // holds a failure: send as soon as nothing is in flight
	// verdicts are the verdicts outcomes of the batch carry, each with
	// the outcome's index.
	verdicts []heldVerdict
	inflight bool // a Record of this scope is running
	queued   bool // in recorder.queue, waiting for a Record to return
	// calmFor is, when the last Record's answer left the scope calm
	// (pace.go), how long successes alone may wait, counted from since,
	// when the oldest of them was taken: the calm interval of the scope's
	// policy; 0 when not calm.
	calmFor time.Duration
	since   time.Time
}

// heldVerdict is a verdict and the index of its outcome in a batch.
type heldVerdict struct {
	v  *verdict
	at int
}

// recordDone is what a Record tells the loop when it returns.
type recordDone struct {
	scope   string
	calmFor time.Duration
}

// recorder delivers outcomes off the calls' path. Outcomes wait, per
// scope and bounded, for one goroutine that sends them with Record as a
// group commit: at most one Record in flight per scope (and maxSending
// across scopes, the others queued in order), the next batch
// accumulating meanwhile. A failure is sent as soon as the previous Record
// returns, so it reaches the coordinator within about one round trip
// however busy the scope; successes alone wait up to the record interval.
// Nothing is retried beyond the one retry of a transport error: an outcome
// that cannot be delivered is dropped and counted.
type recorder struct {
	in recording
	// smu is held while stop closes the shards.
	smu  sync.Mutex
	done chan recordDone // a Record returned
	quit chan struct{}
	// stopped is closed when the loop has returned.
	stopped chan struct{}
	// wg counts the loop and every goroutine it started. Only they add to
	// it, so Close can wait on it without racing an Add.
	wg sync.WaitGroup

	batches map[string]*batch // owned by the loop
	// sending counts the Records in flight, at most maxSending; queue
	// holds, in order, the scopes whose batch must go and waits for one
	// to return. Owned by the loop.
	sending, maxSending int
	queue               []string
	flushBy             time.Time // set by stop before quit is closed

	// shards hold the outcomes and probe settlements added since the
	// loop last took them. A call adds to the shard of its P, mostly
	// (local hands out which), so that calls on several cores share no
	// lock and no cache line; it appends under the shard's lock, and
	// wakes the loop (kick) only for what must not wait: a failure, a
	// probe, a shard's share of a full batch (kickAt). The loop takes the
	// rest every record interval.
	shards []*shard
	local  sync.Pool // *shardOf
	next   atomic.Uint32
	kickAt int
	kick   chan struct{} // cap 1: something waiting must go now
	// merged is the loop's list for merging a scope's outcomes taken
	// from several shards.
	merged []item
}

// recording is what the recorder needs of its Breaker, and no more.
type recording struct {
	queueSize      int           // WithQueueSize
	recordInterval time.Duration // WithRecordInterval
	timeout        time.Duration // WithCoordinatorTimeout
	replica        string        // the replica ID Records carry
	c              coordinator.Coordinator
	// exchange makes one round trip to the coordinator (roundtrip.go).
	exchange func(ctx context.Context, x exchange, f func(ctx context.Context, seen uint64) (answer, error)) (answer, error)
	batchID  func() string
	tel      *telemetry     // counts the outcomes dropped
	known    *knowledge     // the policy of a scope; whether the coordinator heard this replica in it
	health   *health.Status // whether the coordinator is in back-off
}

func newRecorder(in recording) *recorder {
	r := &recorder{
		in:      in,
		done:    make(chan recordDone),
		quit:    make(chan struct{}),
		stopped: make(chan struct{}),
		batches: make(map[string]*batch),
		// Less than half a go-redis client's default pool (10 per
		// GOMAXPROCS), so that a burst of Records over many scopes
		// leaves connections to the admissions and does not time out
		// waiting for one.
		maxSending: 4 * runtime.GOMAXPROCS(0),
		kick:       make(chan struct{}, 1),
	}
	r.shards = make([]*shard, shardsPerP*runtime.GOMAXPROCS(0))
	for i := range r.shards {
		r.shards[i] = &shard{waiting: make(map[string]*[]item), spare: make(map[string]*[]item)}
	}
	// What waits when the loop wakes is then about a full batch, however
	// many shards it is spread over.
	r.kickAt = max(r.fullAt()/len(r.shards), 1)
	r.local.New = func() any { return &shardOf{i: int(r.next.Add(1)) % len(r.shards)} }
	r.wg.Add(1)
	go r.loop()
	return r
}

// testHookRecorderAdd, when set by a test, runs inside add, to interleave
// an outcome with Close.
var testHookRecorderAdd func()

func (r *recorder) loop() {
	defer r.wg.Done()
	defer close(r.stopped)
	tick := time.NewTicker(r.in.recordInterval)
	defer tick.Stop()
	for {
		select {
		case rec := <-r.done:
			r.returned(rec)
		case <-r.kick:
			r.collect("")
		case now := <-tick.C:
			r.collect("")
			for scope, bt := range r.batches {
				switch {
				case bt.inflight:
				case len(bt.outcomes) > 0:
					// since is the tick that took the oldest, which
					// waited up to an interval before it.
					if bt.calmFor == 0 || now.Sub(bt.since)+r.in.recordInterval >= bt.calmFor {
						r.send(scope, bt)
					}
				default:
					delete(r.batches, scope) // idle: forget it
					for _, s := range r.shards {
						s.forget(scope)
					}
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
	n := 1 + it.more
	if room := r.in.queueSize - len(bt.outcomes); n > room {
		r.in.tel.drop(it.scope, dropQueueFull, n-max(room, 0))
		if n = room; n <= 0 {
			it.verdict.release()
			return
		}
	}
	if len(bt.outcomes) == 0 {
		bt.since = time.Now()
	}
	if it.caller.IsValid() && bt.callers == nil {
		bt.callers = make([]trace.SpanContext, len(bt.outcomes), cap(bt.outcomes))
	}
	for range n {
		bt.outcomes = append(bt.outcomes, it.outcome)
	}
	if it.verdict != nil {
		bt.verdicts = append(bt.verdicts, heldVerdict{v: it.verdict, at: len(bt.outcomes) - 1})
	}
	if bt.callers != nil {
		for range n {
			bt.callers = append(bt.callers, it.caller)
		}
	}
	if it.outcome.Failed() || it.urgent {
		bt.urgent = true
	}
}

// ready sends scope's batch if it must go now and nothing of the scope is
// in flight: it holds a failure, or is full.
func (r *recorder) ready(scope string) {
	if bt := r.batches[scope]; bt != nil && !bt.inflight && len(bt.outcomes) > 0 && (bt.urgent || r.full(bt)) {
		r.send(scope, bt)
	}
}

// full reports whether bt holds a batch to send now (fullAt).
func (r *recorder) full(bt *batch) bool {
	return len(bt.outcomes) >= r.fullAt()
}

// fullAt is a full batch: maxBatch outcomes, or half of what the recorder
// holds for a scope when that is less, so that sending starts well before
// outcomes are dropped.
func (r *recorder) fullAt() int {
	return min(maxBatch, max(r.in.queueSize/2, 1))
}

func (r *recorder) returned(rec recordDone) {
	bt := r.finished(rec)
	if bt == nil {
		return
	}
	bt.calmFor = rec.calmFor
	// The next batch takes everything of the scope that waited.
	r.collect(rec.scope)
	r.ready(rec.scope)
}

// finished notes that a Record of rec's scope returned, and lets the
// first scope waiting in the queue send (the longest waiting goes first,
// before the scope that just returned sends again). It returns the
// scope's batch, nil if the scope was forgotten.
func (r *recorder) finished(rec recordDone) *batch {
	r.sending--
	for len(r.queue) > 0 && r.sending < r.maxSending {
		scope := r.queue[0]
		r.queue = r.queue[1:]
		if bt := r.batches[scope]; bt != nil {
			bt.queued = false
			if !bt.inflight && len(bt.outcomes) > 0 {
				r.send(scope, bt)
			}
		}
	}
	bt := r.batches[rec.scope]
	if bt != nil {
		bt.inflight = false
	}
	return bt
}

// send starts a Record of the scope's pending outcomes, or, while
// maxSending Records are in flight, queues the scope until one returns.
func (r *recorder) send(scope string, bt *batch) {
	if r.sending >= r.maxSending {
		if !bt.queued {
			bt.queued = true
			r.queue = append(r.queue, scope)
		}
		return
	}
	r.sending++
	n := min(len(bt.outcomes), r.fullAt())
	outcomes := make([]coordinator.Outcome, n)
	copy(outcomes, bt.outcomes)
	bt.outcomes = append(bt.outcomes[:0], bt.outcomes[n:]...)
	var callers []trace.SpanContext
	if bt.callers != nil {
		callers = make([]trace.SpanContext, n)
		copy(callers, bt.callers)
		bt.callers = append(bt.callers[:0], bt.callers[n:]...)
	}
	var verdicts []*verdict
	kept := bt.verdicts[:0]
	for _, h := range bt.verdicts {
		if h.at < n {
			verdicts = append(verdicts, h.v)
		} else {
			kept = append(kept, heldVerdict{v: h.v, at: h.at - n})
		}
	}
	bt.verdicts = kept
	bt.urgent = false
	for _, o := range bt.outcomes {
		if o.Failed() {
			bt.urgent = true
			break
		}
	}
	bt.inflight = true

	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		calmFor := r.record(scope, outcomes, callers)
		for _, v := range verdicts {
			v.release()
		}
		select {
		case r.done <- recordDone{scope: scope, calmFor: calmFor}:
		case <-r.stopped:
		}
	}()
}

// record sends one batch and returns, if the answer left the scope calm
// (pace.go), how long its successes may wait; 0 if not calm.
func (r *recorder) record(scope string, outcomes []coordinator.Outcome, callers []trace.SpanContext) time.Duration {
	in := r.in
	if in.health.InBackoff() {
		in.tel.drop(scope, dropBackoff, len(outcomes))
		return 0
	}
	// The same ID on the retry: a Record that did land before its answer
	// was lost then counts once.
	pol := in.known.policyOf(scope)
	q := coordinator.RecordRequest{Scope: scope, Policy: pol.p, Outcomes: outcomes, Replica: in.replica, BatchID: in.batchID(), Source: pol.src}
	cause := func(a answer) (trace.SpanContext, []trace.Link) {
		return blame(outcomes, callers, a, pol.p)
	}
	a, err := in.exchange(context.Background(), exchange{op: "record", scope: scope, timeout: in.timeout, wg: &r.wg, cause: cause},
		func(ctx context.Context, seen uint64) (answer, error) {
			q := q // each attempt's own: an abandoned one may still read it
			q.Seen = seen
			res, err := in.c.Record(ctx, q)
			return recordedAnswer(res), err
		})
	if err != nil {
		in.tel.drop(scope, dropCoordinator, len(outcomes))
		return 0
	}
	if !calm(pol.p, a) {
		return 0
	}
	return calmInterval(in.recordInterval, pol.p)
}

// settle reports a probe's outcome, in its own goroutine: probes are few
// (Policy.Probes fleet-wide) and each one decides recovery, so they do not
// wait for a batch. A settlement that cannot be delivered is dropped: the
// probe's lease frees its slot.
func (r *recorder) settle(it item) {
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		defer it.verdict.release()
		in := r.in
		if in.health.InBackoff() {
			in.tel.drop(it.scope, dropBackoff, 1)
			return
		}
		// The probe causes what its settlement does: a transition span is
		// the probe call's child.
		probe := func(answer) (trace.SpanContext, []trace.Link) { return it.caller, nil }
		_, err := in.exchange(context.Background(), exchange{op: "settle", scope: it.scope, timeout: in.timeout, wg: &r.wg, cause: probe},
			func(ctx context.Context, seen uint64) (answer, error) {
				res, err := in.c.Settle(ctx, coordinator.SettleRequest{Scope: it.scope, Policy: in.known.policyOf(it.scope).p, Claim: it.claim, Outcome: it.outcome, Seen: seen})
				return resulted(res), err
			})
		if err != nil {
			in.tel.drop(it.scope, dropCoordinator, 1)
		}
	}()
}

// stop flushes what is pending and waits for every goroutine of the
// recorder, until deadline. It reports whether all of them returned.
func (r *recorder) stop(deadline time.Time) bool {
	r.flushBy = deadline
	// Every add that saw its shard open has queued its outcome once the
	// shard is closed: flush finds it.
	r.smu.Lock()
	for _, s := range r.shards {
		s.mu.Lock()
		s.closed = true
		s.mu.Unlock()
	}
	r.smu.Unlock()
	close(r.quit)
	return waitUntil(&r.wg, deadline)
}

// flush sends everything still queued or pending, each scope's batches one
// after another, until r.flushBy; what is left then is dropped and counted.
func (r *recorder) flush() {
	r.collect("")
	timer := time.NewTimer(time.Until(r.flushBy))
	defer timer.Stop()
	for {
		for scope, bt := range r.batches {
			if !bt.inflight && len(bt.outcomes) > 0 {
				r.send(scope, bt)
			}
		}
		if r.sending == 0 {
			return
		}
		select {
		case rec := <-r.done:
			r.finished(rec)
		case <-timer.C:
			for scope, bt := range r.batches {
				if n := len(bt.outcomes); n > 0 {
					r.in.tel.drop(scope, dropClosed, n)
				}
				for _, h := range bt.verdicts {
					h.v.release()
				}
			}
			return
		}
	}
}

// blame returns the span context of the call that caused the transition a
// Record of outcomes made, the transition span's parent, and links to the
// other traced calls of the batch, up to maxLinks. callers[i] made
// outcomes[i]; callers is nil when no call was traced. The cause of a trip
// is the failing (or slow) call whose outcome tipped the window, or the
// last one counted before it, so that the trip shows in the trace of a
// request that failed; a sampled one first, so that the trip is kept. With
// none traced, it is the call that tipped the window (a success that
// brought it to MinCalls), which may be untraced: a root span.
func blame(outcomes []coordinator.Outcome, callers []trace.SpanContext, a answer, p coordinator.Policy) (trace.SpanContext, []trace.Link) {
	if len(callers) != len(outcomes) {
		return trace.SpanContext{}, nil
	}
	last, gen, ok := tip(outcomes, a)
	if !ok {
		last, gen = len(outcomes)-1, 0
	}
	counted := func(i int) bool {
		o := outcomes[i]
		return (gen == 0 || o.Generation == gen) && (o.Failed() || p.IsSlow(o.Duration))
	}
	cause := -1
	for i := last; i >= 0 && cause < 0; i-- {
		if counted(i) && callers[i].IsSampled() {
			cause = i
		}
	}
	for i := last; i >= 0 && cause < 0; i-- {
		if counted(i) && callers[i].IsValid() {
			cause = i
		}
	}
	if cause < 0 {
		cause = last
	}
	var links []trace.Link
	for i, sc := range callers {
		if len(links) == maxLinks {
			break
		}
		if i != cause && sc.IsValid() {
			links = append(links, trace.Link{SpanContext: sc})
		}
	}
	return callers[cause], links
}

// tip returns the index in outcomes of the outcome after which a Record
// tripped the breaker, and the generation it counted. The coordinator
// applies a batch in order; the outcomes after the trip are stale, as are
// those of another generation than the closed one, the highest below the
// trip's. ok is false when the answer is no trip, or its stale count does
// not add up.
func tip(outcomes []coordinator.Outcome, a answer) (i int, gen uint64, ok bool) {
	tr := a.transition
	if tr == nil || tr.From != coordinator.StateClosed || tr.To != coordinator.StateOpen {
		return 0, 0, false
	}
	for _, o := range outcomes {
		if o.Generation < tr.Generation && o.Generation > gen {
			gen = o.Generation
		}
	}
	counted := 0
	for _, o := range outcomes {
		if o.Generation == gen {
			counted++
		}
	}
	after := a.stale - (len(outcomes) - counted) // counted outcomes after the trip: stale with it
	if gen == 0 || after < 0 || after >= counted {
		return 0, 0, false
	}
	for i := len(outcomes) - 1; i >= 0; i-- {
		if outcomes[i].Generation != gen {
			continue
		}
		if after == 0 {
			return i, gen, true
		}
		after--
	}
	return 0, 0, false
}
