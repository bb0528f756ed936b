package cbgrpc

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/status"

	"github.com/cbgrpc/cbgrpc/coordinator"
	"github.com/cbgrpc/cbgrpc/internal/health"
	"github.com/cbgrpc/cbgrpc/internal/instant"
)

// Breaker is the client side of a fleet-wide circuit breaker: it derives the
// scope of each call, asks the coordinator to admit it, classifies how it
// ended and records the outcome in the background. One Breaker serves both
// its unary and its stream interceptor, and any number of ClientConns; it
// is safe for concurrent use. Close it when the process is done with it.
type Breaker struct {
	c      coordinator.Coordinator
	cfg    config
	tel    *telemetry
	rec    *recorder
	known  *knowledge
	notify *notifier
	health *health.Status
	ids    ids
	routes *routes
	// inline: the coordinator honours deadlines (coordinator.Bounded), so
	// its calls run in the caller's goroutine (attempt).
	inline bool

	// stop ends the background work (the feed, forgetting idle scopes);
	// background counts its goroutines.
	stop       context.CancelFunc
	background sync.WaitGroup

	// mu orders closed against enter, so that no admission starts work
	// after Close; admits counts the admissions in progress and their
	// coordinator calls.
	mu     sync.RWMutex
	closed atomic.Bool
	admits sync.WaitGroup
	// pushing holds the scopes a server's pushback is being sent for
	// (pushback.go).
	pushing   sync.Map
	closeOnce sync.Once
	closeErr  error
}

// New returns a Breaker over c. It fails when an option cannot work,
// naming it; an invalid policy is reported wrapping
// [coordinator.ErrInvalidPolicy].
func New(c coordinator.Coordinator, opts ...Option) (*Breaker, error) {
	if c == nil {
		return nil, errNilCoordinator
	}
	if v := reflect.ValueOf(c); v.Kind() == reflect.Pointer && v.IsNil() {
		return nil, fmt.Errorf("cbgrpc: New: coordinator is a nil %T; pass memory.New() or redis.New(client)", c)
	}
	cfg := newConfig(opts)
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if _, ok := c.(coordinator.Pusher); cfg.pushback != nil && !ok {
		return nil, fmt.Errorf("cbgrpc: WithServerPushback: the coordinator (%T) is no coordinator.Pusher", c)
	}
	w, watches := c.(coordinator.Watcher)
	maxAge := cfg.cacheMaxAge
	if !watches {
		// Without a feed nothing tells of a trip made elsewhere.
		maxAge = 0
	}
	known := newKnowledge(maxAge, cfg.policy.Window, cfg.policy)
	tel, err := newTelemetry(&cfg, known)
	if err != nil {
		return nil, fmt.Errorf("cbgrpc: New: creating metric instruments: %w", err)
	}
	b := &Breaker{c: c, cfg: cfg, tel: tel, known: known, health: health.New(cfg.backoff),
		routes: newRoutes(cfg.scope)}
	if bc, ok := c.(coordinator.Bounded); ok {
		b.inline = bc.HonoursDeadlines()
	}
	b.ids.prefix = newIDPrefix()
	b.notify = newNotifier(cfg.onTransition, tel.learned, 2*cfg.timeout)
	b.rec = newRecorder(recording{queueSize: cfg.queueSize, recordInterval: cfg.recordInterval, timeout: cfg.timeout,
		replica: cfg.replica, c: c, exchange: b.roundTrip, batchID: b.ids.next, tel: tel, known: known, health: b.health})
	ctx, stop := context.WithCancel(context.Background())
	b.stop = stop
	b.goBackground(func() { b.forgetIdle(ctx) })
	if cfg.stallAfter != StallsOff {
		b.goBackground(func() { b.watchStalls(ctx) })
	}
	warm := b.warmUp()
	var share *sharing
	if ctl, ok := c.(coordinator.Controller); ok {
		share = newSharing(ctl, known, cfg.policy, maxAge == 0)
		b.goBackground(func() { share.run(ctx, warm) })
	}
	if maxAge > 0 {
		f := &feed{w: w, k: b.known, share: share, tell: b.notify.heardOnFeed, lost: func(err error) { b.tel.feedLost(ctx, err) }}
		b.goBackground(func() { f.run(ctx) })
	}
	return b, nil
}

func (b *Breaker) goBackground(f func()) {
	b.background.Add(1)
	go func() {
		defer b.background.Done()
		f()
	}()
}

// forgetIdle drops from the table, every quarter of a window, the scopes
// that had no call for a whole window: memory is bounded by the scopes in
// use. (The recorder forgets its own batches of idle scopes.)
func (b *Breaker) forgetIdle(ctx context.Context) {
	t := time.NewTicker(max(b.known.idle/4, 10*time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			b.known.forget(instant.Now())
		}
	}
}

// warmUpTimeout bounds the warm-up call.
const warmUpTimeout = 5 * time.Second

// warmUp makes one read-only coordinator call in the background, so that
// the first admission does not pay for what a first call costs (a Redis
// client dials its connection): under load that can exceed the
// coordinator timeout and send a process that just started into back-off,
// its calls unprotected. Its outcome is of no interest.
//
// The returned channel is closed when it is over.
func (b *Breaker) warmUp() <-chan struct{} {
	done := make(chan struct{})
	b.admits.Add(1)
	go func() {
		defer b.admits.Done()
		defer close(done)
		defer func() { recover() }() // a panicking coordinator is reported by the first real call
		ctx, cancel := context.WithTimeout(context.Background(), warmUpTimeout)
		defer cancel()
		b.c.Snapshot(ctx, "", b.cfg.policy)
	}()
	return done
}

func mustNew(fn string, c coordinator.Coordinator, opts []Option) *Breaker {
	b, err := New(c, opts...)
	if err != nil {
		panic(fmt.Sprintf("cbgrpc.%s: %v", fn, err))
	}
	return b
}

// Close stops the Breaker: it sends the outcomes still waiting, waits for
// the coordinator calls it started, and returns once no goroutine of the
// Breaker is left, or after 10 seconds with an error saying what was left
// behind. Outcomes that cannot be sent by then are dropped and counted.
// Close returns within a round trip to a working coordinator; a call stuck
// in a coordinator that ignores deadlines (a paused Redis behind a go-redis
// client without ContextTimeoutEnabled: up to its 5s ReadTimeout) is waited
// for. The transitions learned by then are passed to the callback of
// [WithOnTransition], which is not called after Close returns, and the
// cbgrpc.state gauge stops observing. Calls made after Close run
// unprotected. Close is idempotent.
func (b *Breaker) Close() error {
	b.closeOnce.Do(func() { b.closeErr = b.close() })
	return b.closeErr
}

func (b *Breaker) close() error {
	b.mu.Lock()
	b.closed.Store(true)
	b.mu.Unlock()

	deadline := time.Now().Add(closeTimeout)
	var errs []error
	b.stop()
	if !waitUntil(&b.background, deadline) {
		errs = append(errs, errors.New("transition feed still open"))
	}
	if !b.rec.stop(deadline) {
		errs = append(errs, errors.New("recorder still sending"))
	}
	if !waitUntil(&b.admits, deadline) {
		errs = append(errs, errors.New("admissions still waiting for the coordinator"))
	}
	// Last: whatever learns transitions has stopped.
	if !b.notify.stop(deadline) {
		errs = append(errs, errors.New("the WithOnTransition callback still running"))
	}
	if err := b.tel.stop(); err != nil {
		errs = append(errs, fmt.Errorf("unregistering the cbgrpc.state gauge: %w", err))
	}
	if len(errs) > 0 {
		return fmt.Errorf("cbgrpc: Close: after %v: %w", closeTimeout, errors.Join(errs...))
	}
	return nil
}

// waitUntil waits for wg until deadline and reports whether it finished.
func waitUntil(wg *sync.WaitGroup, deadline time.Time) bool {
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	t := time.NewTimer(time.Until(deadline))
	defer t.Stop()
	select {
	case <-done:
		return true
	case <-t.C:
		return false
	}
}

// enter registers work that may call the coordinator, unless the Breaker
// is closed; the caller calls b.admits.Done when it is over.
func (b *Breaker) enter() bool {
	b.mu.RLock()
	defer b.mu.RUnlock()
	if b.closed.Load() {
		return false
	}
	b.admits.Add(1)
	return true
}

// fate is what becomes of an admitted call's outcome.
type fate int8

const (
	// unprotected: no breaker applies (the Breaker is closed, or a dry
	// run let through a call it would have rejected); the outcome is not
	// taken.
	unprotected fate = iota
	// recorded: admitted while closed; the outcome goes to Record.
	recorded
	// probing: a half-open probe; the outcome settles its claim.
	probing
	// unadmitted: let through by the failure policy, with no generation
	// to record under; the outcome is counted as dropped.
	unadmitted
)

// call is a protected call on its way through the pipeline: what its
// route says of it, then what its admission decided to do with its
// outcome. It lives on the caller's stack, passed by address.
type call struct {
	scope      string
	method     string     // the full method: "/pkg.Service/Method"
	classifier Classifier // the call's own (CallClassifier); nil: the Breaker's
	// slot, when set, is where the call's route keeps the scope's row of
	// the table (route.go).
	slot *atomic.Pointer[known]
	rpc  *rpcMethod // its attributes in telemetry, its route's (route.go)
	// start is when its admission began, then, once admitted, when its
	// duration counts from.
	start instant.Time

	// Set by admit.
	fate  fate
	gen   uint64 // the generation admitted under
	claim string // a probe's
	// outlierProbe: the call is this replica's probe as an outlier
	// (outlier.go): its outcome says so (Outcome.Probe) and goes to the
	// coordinator at once.
	outlierProbe bool
	// untimed: the policy admitted under counts no slow calls, so the
	// call's duration is not read (a clock read saved on every call);
	// slowAfter, when it does, is its SlowCallDuration: a slow call's
	// outcome goes at once, as a failure's does, so that a brownout of
	// latency is judged as soon as one of errors.
	untimed   bool
	slowAfter time.Duration
	// row is the scope's row of the table when the call was admitted
	// (nil: none), whose run of failures a success ends (verdict.go).
	row *known
	// watch is the scope's stall watch until the call arrives, and tick
	// the tick the call took off in (0: not watched), for a call admitted
	// closed (stall.go); stalled, once it arrived, says it had been
	// reported stalled. unwatched: the call may wait for its caller before
	// any answer (a client or bidi stream), and is never stalled.
	watch     *stallWatch
	tick      int64
	stalled   bool
	unwatched bool
}

// admit decides whether c runs, and notes in c what becomes of its
// outcome (fate). A nil error means it runs; otherwise the error is the
// call's result: a rejection
// ([*OpenError]) or the caller's own context error. It is the path of one
// admission: what the table knows of the scope, the coordinator asked or
// not, the decision shaped (ramp, throttle), and the result.
func (b *Breaker) admit(ctx context.Context, c *call) error {
	if b.closed.Load() {
		c.fate = unprotected
		return nil
	}
	c.start = instant.Now()
	f, row := b.known.useRow(c.slot, c.scope, c.start)
	var d decision
	if b.cached(f, row, c.start) {
		// Nothing to wait for nor to ask: no work Close waits for.
		fromTable(&d, c, f, row, b.known.policyIn(f))
	} else {
		var err error
		var done bool
		if d, err, done = b.consult(ctx, c, f, row); done {
			return err
		}
	}
	c.gen = d.gen // admitted in, or rejected in
	if e, throttled := b.shape(ctx, c, &d); e != nil {
		if throttled {
			// Counted in the window as a throttled request (throttle.go).
			b.rec.add(&item{scope: c.scope, outcome: coordinator.Outcome{Generation: d.gen, Throttled: true}, at: instant.Now()})
		}
		return e
	}
	return b.result(ctx, c, &d)
}

// decision is what decides an admitted or rejected call before it is
// shaped: the table's answer, or the coordinator's.
type decision struct {
	by         decider // byCache or byCoordinator
	verdict    coordinator.Verdict
	state      coordinator.State
	gen        uint64
	claim      string        // a probe's
	start      instant.Time  // when the call's duration counts from
	retryAfter time.Duration // rejected: when to try again
	rampLeft   time.Duration // closed: what is left of the ramp after a recovery
	// window is what the table knows of the fleet's window in the
	// generation admitted under, to throttle by; nil: nothing of it.
	window *window
	policy *coordinator.Policy // the policy in force; never changed once made
	row    *known              // the scope's row of the table
	// cause is, for a rejection or a ramp, the span that recorded the
	// transition behind it, to link to (cause.go).
	cause trace.SpanContext
}

// cached reports whether f, what the table knows at now of a scope whose
// row is row, decides a call there and then: the scope is no outlier's,
// no verdict is pending, and the table's answer serves.
func (b *Breaker) cached(f *fact, row *known, now instant.Time) bool {
	return !f.outlier.of(f) && row.verdict.Load() == nil && b.health.Trusted() && b.known.answers(f, now)
}

// fromTable writes into d, a zero decision, the decision of c from f,
// what the table knows, without a round trip: the admission cache.
func fromTable(d *decision, c *call, f *fact, row *known, pol *inForce) {
	// Field by field, into the zero decision the caller holds: a
	// literal would be built aside and copied.
	d.by, d.state, d.gen, d.start, d.policy, d.row = byCache, f.state, f.gen, c.start, &pol.p, row
	if !admitsAll(f.state) {
		d.verdict, d.retryAfter, d.cause = coordinator.Reject, f.until.Sub(c.start), f.cause
		return
	}
	d.verdict, d.window = coordinator.Allow, &f.window
	if !f.rampEnd.IsZero() {
		d.rampLeft, d.cause = f.rampEnd.Sub(c.start), f.cause
	}
}

// consult decides c when what the table knows (f, row) does not decide
// it alone: it waits for the verdict pending in the scope, if any, and
// then decides by the table, an outlier's rules, the coordinator, or
// without it. done reports that err is the call's result already, and
// c notes its fate; otherwise d is the decision to shape.
func (b *Breaker) consult(ctx context.Context, c *call, f *fact, row *known) (d decision, err error, done bool) {
	if !b.enter() {
		c.fate = unprotected
		return decision{}, nil, true
	}
	defer b.admits.Done()
	now := c.start
	// One wait for the coordinator per call, however it is spent: the
	// verdict first, then the admission gets what is left.
	budget := b.cfg.timeout
	if b.awaitVerdict(ctx, row) {
		now = instant.Now()
		budget -= now.Sub(c.start)
		f, row = b.known.use(c.scope, now)
	}
	if err, ok := b.admitOutlier(ctx, c, f); ok {
		c.row = row
		return decision{}, err, true
	}
	pol := b.known.policyIn(f)
	if b.health.Trusted() && b.known.answers(f, now) {
		fromTable(&d, c, f, row, pol)
		return d, nil, false
	}
	if !b.health.MayAsk() {
		err := b.decideWithout(ctx, c, nil)
		c.row = row
		return decision{}, err, true
	}
	if budget <= 0 {
		// The verdict never came: the coordinator did not answer a Record
		// within the timeout, and this call has waited its whole wait.
		b.health.Failed(errNoVerdict, true)
		err := b.decideWithout(ctx, c, errNoVerdict)
		c.row = row
		return decision{}, err, true
	}
	d, err = b.ask(ctx, c, f, pol, budget)
	if err != nil {
		if ctx.Err() != nil {
			// The caller gave up: its call would have failed the same way.
			return decision{}, status.FromContextError(ctx.Err()).Err(), true
		}
		err := b.decideWithout(ctx, c, err)
		c.row = row
		return decision{}, err, true
	}
	d.row = row
	return d, nil, false
}

// ask asks the coordinator to admit c, under pol, the policy f, what the
// table knows of the scope, says, waiting at most timeout.
func (b *Breaker) ask(ctx context.Context, c *call, f *fact, pol *inForce, timeout time.Duration) (decision, error) {
	claim := b.ids.next()
	scope := c.scope // not c: the closure would take the call to the heap
	var d coordinator.Decision
	_, err := b.roundTrip(ctx, exchange{op: "admit", scope: scope, timeout: timeout, wg: &b.admits, admission: true},
		func(ctx context.Context, seen uint64) (answer, error) {
			var err error
			d, err = b.c.Admit(ctx, coordinator.AdmitRequest{Scope: scope, Policy: pol.p, Claim: claim, Seen: seen})
			return decided(d), err
		})
	if err != nil {
		return decision{}, err
	}
	dd := decision{by: byCoordinator, verdict: d.Verdict, state: d.State, gen: d.Generation, start: instant.Now(),
		retryAfter: d.RetryAfter, rampLeft: d.RampLeft, policy: &pol.p}
	if d.Cause != "" {
		dd.cause = spanOf(d.Cause)
	}
	if d.Verdict == coordinator.Probe {
		dd.claim = claim
	}
	// The window's counts of the generation admitted under, as the last
	// Record said them.
	if f.gen == d.Generation {
		dd.window = &f.window
	}
	return dd, nil
}

// shape applies to a call admitted while closed the ramp after a
// recovery, then adaptive throttling: either may reject it. throttled
// reports that the throttle did, which counts in the window.
func (b *Breaker) shape(ctx context.Context, c *call, d *decision) (e *OpenError, throttled bool) {
	if d.verdict != coordinator.Allow || d.state != coordinator.StateClosed {
		return nil, false
	}
	if e := b.ramping(ctx, c, d.rampLeft, d.policy, d.cause); e != nil {
		return e, false
	}
	if d.window == nil {
		return nil, false
	}
	if e := b.throttling(ctx, c, d.window, d.policy); e != nil {
		return e, true
	}
	return nil, false
}

// result notes in c the fate of a call d admits, or returns its
// rejection.
func (b *Breaker) result(ctx context.Context, c *call, d *decision) error {
	b.tel.decision(ctx, c, d.verdict, d.by)
	switch d.verdict {
	case coordinator.Reject:
		e := &OpenError{Scope: c.scope, State: d.state, RetryAfter: d.retryAfter, Reason: rejectReason(d.state)}
		b.tel.rejected(ctx, c, e, d.by, d.cause)
		return e
	case coordinator.Probe:
		c.fate, c.claim = probing, d.claim
	default:
		c.fate, c.untimed, c.slowAfter = recorded, d.policy.SlowCallDuration == 0, d.policy.SlowCallDuration
	}
	c.start, c.row = d.start, d.row
	if c.fate == recorded && !c.unwatched {
		b.takeOff(c)
	}
	return nil
}

func rejectReason(s coordinator.State) string {
	switch s {
	case coordinator.StateHalfOpen:
		return "every probe slot is taken"
	case coordinator.StateIsolated:
		return "isolated by an operator"
	}
	return "the dependency is failing"
}

// finish classifies the end of an admitted call, hands its outcome to the
// recorder, and returns its class (Ignore when it was not classified). It
// never changes the call's result.
func (b *Breaker) finish(ctx context.Context, c *call, err error) Class {
	if c.fate == unprotected {
		return Ignore
	}
	var d time.Duration
	var end instant.Time
	if !c.untimed {
		end = instant.Now()
		d = end.Sub(c.start)
	}
	// Reported stalled (stall.go): its outcome is not sent again. (A
	// stream arrived at its first message already.)
	c.arrive(end)
	class := Ignore
	// Our own rejection (from another Breaker further down the chain) says
	// nothing about the dependency.
	if err == nil || !errors.Is(err, ErrOpen) {
		class = b.classify(ctx, c.classifier, c.method, err)
	}
	switch {
	case class == Ignore, c.stalled:
		// An ignored probe is not settled: its lease frees the slot. A
		// stalled call was sent as a failure while it ran.
		return class
	case c.fate == unadmitted:
		b.tel.drop(c.scope, dropUnadmitted, 1)
		return class
	}
	// Field by field: a literal would be built aside and copied.
	var it item
	it.scope = c.scope
	it.outcome.Generation, it.outcome.Failure, it.outcome.Duration = c.gen, class == Failure, d
	it.at = c.start.Add(d)
	it.caller = trace.SpanContextFromContext(ctx)
	it.outcome.Probe = c.outlierProbe
	it.urgent = c.outlierProbe || (c.slowAfter > 0 && d >= c.slowAfter)
	if class == Failure {
		// A failure seen here may be the start of a trip: until the
		// coordinator answers again, this scope's admissions ask it, so
		// that a failing dependency is not fed from the table while the
		// news of the trip travels; and it may make this replica's run
		// long enough to wait for a verdict (verdict.go).
		it.verdict = b.known.failed(c.scope)
	} else {
		c.row.succeeded()
	}
	if c.fate == probing {
		it.claim = c.claim
	}
	b.rec.add(&it)
	return class
}

// ids makes the unique IDs of claims and batches: a random prefix per
// Breaker and a counter, so that an admission pays neither a random read
// nor more than one allocation. The IDs are short on purpose: the Redis
// coordinator keeps a scope's last 64 batch IDs in its state hash, read
// and written by every Record.
type ids struct {
	prefix string
	n      atomic.Uint64
}

func (g *ids) next() string {
	var buf [64]byte
	return string(strconv.AppendUint(append(buf[:0], g.prefix...), g.n.Add(1), 36))
}

// newIDPrefix is 72 random bits (of a UUID's 122), 12 characters in
// base64url, and a dot: two Breakers of a fleet share a prefix with a
// probability of about n²/2⁷³ for n Breakers.
func newIDPrefix() string {
	u := uuid.New()
	return base64.RawURLEncoding.EncodeToString(u[:9]) + "."
}
