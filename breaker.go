package cbgrpc

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"google.golang.org/grpc/status"

	"github.com/cbgrpc/cbgrpc/coordinator"
)

// Breaker is the client side of a fleet-wide circuit breaker: it derives the
// scope of each call, asks the coordinator to admit it, classifies how it
// ended and records the outcome in the background. One Breaker serves both
// its unary and its stream interceptor, and any number of ClientConns; it
// is safe for concurrent use. Close it when the process is done with it.
type Breaker struct {
	c     coordinator.Coordinator
	cfg   config
	tel   *telemetry
	rec   *recorder
	cache *admissionCache // nil when off or when the coordinator has no feed

	// known holds the scopes this process last saw open or half-open:
	// while the coordinator is unreachable they are rejected. Closed
	// scopes are not kept, since "closed" and "never seen" decide alike.
	known sync.Map // scope -> knownState

	// downUntil is when calls may ask the coordinator again after it
	// failed (UnixNano; 0 while it works). trying lets one call ask after
	// the back-off, while the others keep deciding without it.
	downUntil atomic.Int64
	trying    atomic.Bool

	// mu guards closed, so that no admission starts work after Close.
	mu      sync.RWMutex
	closed  bool
	admits  sync.WaitGroup // admissions in progress and their coordinator calls
	closeMu sync.Mutex
	closeOK bool
	closeEr error
}

type knownState struct {
	state   coordinator.State
	retryAt time.Time // local time when probes may start, if known
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
	tel, err := newTelemetry(&cfg)
	if err != nil {
		return nil, fmt.Errorf("cbgrpc: New: creating metric instruments: %w", err)
	}
	b := &Breaker{c: c, cfg: cfg, tel: tel}
	b.rec = newRecorder(b)
	if w, ok := c.(coordinator.Watcher); ok && cfg.cacheMaxAge > 0 {
		b.cache = newAdmissionCache(b, w, cfg.cacheMaxAge)
	}
	b.warmUp()
	return b, nil
}

// warmUpTimeout bounds the warm-up call.
const warmUpTimeout = 5 * time.Second

// warmUp makes one read-only coordinator call in the background, so that
// the first admission does not pay for what a first call costs (a Redis
// client dials its connection): under load that can exceed the
// coordinator timeout and send a process that just started into back-off,
// its calls unprotected. Its outcome is of no interest.
func (b *Breaker) warmUp() {
	b.admits.Add(1)
	go func() {
		defer b.admits.Done()
		defer func() { recover() }() // a panicking coordinator is reported by the first real call
		ctx, cancel := context.WithTimeout(context.Background(), warmUpTimeout)
		defer cancel()
		b.c.Snapshot(ctx, "", b.cfg.policy)
	}()
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
// for. Calls made after Close run unprotected. Close is idempotent.
func (b *Breaker) Close() error {
	b.closeMu.Lock()
	defer b.closeMu.Unlock()
	if b.closeOK {
		return b.closeEr
	}
	b.closeOK = true

	b.mu.Lock()
	b.closed = true
	b.mu.Unlock()

	deadline := time.Now().Add(closeTimeout)
	var errs []error
	if b.cache != nil && !b.cache.stop(deadline) {
		errs = append(errs, errors.New("transition feed still open"))
	}
	if !b.rec.stop(deadline) {
		errs = append(errs, errors.New("recorder still sending"))
	}
	if !waitUntil(&b.admits, deadline) {
		errs = append(errs, errors.New("admissions still waiting for the coordinator"))
	}
	if len(errs) > 0 {
		b.closeEr = fmt.Errorf("cbgrpc: Close: after %v: %w", closeTimeout, errors.Join(errs...))
	}
	return b.closeEr
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

// enter registers an admission unless the Breaker is closed.
func (b *Breaker) enter() bool {
	b.mu.RLock()
	defer b.mu.RUnlock()
	if b.closed {
		return false
	}
	b.admits.Add(1)
	return true
}

// ticket is an admitted call: what to do with its outcome.
type ticket struct {
	scope   string
	verdict coordinator.Verdict
	gen     uint64
	claim   string
	track   bool // false: the call runs without admission and its outcome is not recorded
	start   time.Time
	// unrecorded says why the outcome of an untracked call that is
	// protected cannot be recorded (it was let through without the
	// coordinator, so it has no generation): it is counted as dropped.
	unrecorded string
}

// scopeOf returns the scope of a call, "" when it is not protected.
func (b *Breaker) scopeOf(ctx context.Context, target, method string) string {
	if b.cfg.excluded.has(method) {
		return ""
	}
	return b.cfg.scope(ctx, target, method)
}

// admit decides whether a call of scope runs. A nil error means it runs;
// otherwise the error is the call's result: a rejection ([*OpenError]) or
// the caller's own context error.
func (b *Breaker) admit(ctx context.Context, scope string) (ticket, error) {
	if !b.enter() {
		return ticket{}, nil
	}
	defer b.admits.Done()

	// While the coordinator fails, what the cache knows is no excuse to
	// skip the failure policy: Records are failing too, and a trip could go
	// unheard.
	if b.cache != nil && !b.inBackoff() {
		if t, answered, err := b.admitCached(ctx, scope); answered {
			return t, err
		}
	}
	if !b.mayAsk() {
		return b.decideWithout(ctx, scope, nil)
	}
	epoch := b.learning(scope)
	claim := uuid.NewString()
	var d coordinator.Decision
	err := b.call(ctx, scope, "admit", &b.admits, func(ctx context.Context) error {
		var err error
		d, err = b.c.Admit(ctx, scope, b.cfg.policy, claim)
		return err
	})
	if err != nil {
		if ctx.Err() != nil {
			// The caller gave up: its call would have failed the same way,
			// and the coordinator is not to blame.
			b.trying.Store(false)
			return ticket{}, status.FromContextError(ctx.Err()).Err()
		}
		b.failedOn(err)
		return b.decideWithout(ctx, scope, err)
	}
	b.recovered()
	var until time.Time
	if d.Verdict == coordinator.Reject && d.RetryAfter > 0 {
		until = time.Now().Add(d.RetryAfter)
	}
	b.learn(epoch, scope, d.State, d.Generation, until)
	if d.Transition != nil {
		b.tel.transition(ctx, d.Transition, nil)
	}
	b.tel.decision(ctx, scope, d.Verdict, byCoordinator)
	if d.Verdict == coordinator.Reject {
		e := &OpenError{Scope: scope, State: d.State, RetryAfter: d.RetryAfter, Reason: rejectReason(d.State)}
		rejected(ctx, e)
		return ticket{}, e
	}
	return ticket{scope: scope, verdict: d.Verdict, gen: d.Generation, claim: claim, track: true, start: time.Now()}, nil
}

// admitCached answers from the admission cache when it can.
func (b *Breaker) admitCached(ctx context.Context, scope string) (t ticket, answered bool, err error) {
	now := time.Now()
	e, ok := b.cache.lookup(scope, now)
	if !ok {
		return ticket{}, false, nil
	}
	if admitsAll(e.state) {
		b.tel.decision(ctx, scope, coordinator.Allow, byCache)
		return ticket{scope: scope, verdict: coordinator.Allow, gen: e.gen, track: true, start: now}, true, nil
	}
	b.tel.decision(ctx, scope, coordinator.Reject, byCache)
	oe := &OpenError{Scope: scope, State: e.state, RetryAfter: e.until.Sub(now), Reason: rejectReason(e.state)}
	rejected(ctx, oe)
	return ticket{}, true, oe
}

// learning is called before a coordinator call about scope; its result goes
// with the answer to learned, so that the admission cache keeps only what
// it may trust.
func (b *Breaker) learning(scope string) uint64 {
	if b.cache == nil {
		return 0
	}
	return b.cache.begin(scope)
}

// learn keeps what the coordinator said about scope, in answer to a
// question asked in epoch (see learning), both in the memory of non-closed
// scopes (for when the coordinator is unreachable) and in the admission
// cache. until is when the scope may admit again as far as the answer
// tells; zero when it does not say, and then what was known stands.
func (b *Breaker) learn(epoch uint64, scope string, s coordinator.State, gen uint64, until time.Time) {
	if admitsAll(s) {
		b.known.Delete(scope)
	} else {
		ks := knownState{state: s, retryAt: until}
		if old, ok := b.known.Load(scope); ok && until.IsZero() {
			ks.retryAt = old.(knownState).retryAt
		}
		b.known.Store(scope, ks)
	}
	if b.cache != nil {
		b.cache.observe(epoch, scope, s, gen, until)
	}
}

// learnResult keeps what a Record, a Settle, an operator's command or the
// feed said about scope. A result carries no open period: a trip it tells
// of is open for at least OpenFor.
func (b *Breaker) learnResult(epoch uint64, scope string, res coordinator.Result) {
	var until time.Time
	if t := res.Transition; t != nil && t.To == coordinator.StateOpen {
		until = time.Now().Add(b.cfg.policy.OpenFor)
	}
	b.learn(epoch, scope, res.State, res.Generation, until)
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

// decideWithout decides a call while the coordinator is unavailable (cause
// is its error, or nil during the back-off): a scope last seen not closed
// is rejected, others follow the failure policy. There is deliberately no
// local breaker to fall back on: it would be the per-replica breaker the
// shared one replaces, at the worst moment.
func (b *Breaker) decideWithout(ctx context.Context, scope string, cause error) (ticket, error) {
	retry := b.backoffLeft()
	var e *OpenError
	by := byFailurePolicy
	if k, ok := b.known.Load(scope); ok {
		ks := k.(knownState)
		retry = max(retry, time.Until(ks.retryAt))
		by = byKnownState
		e = &OpenError{Scope: scope, State: ks.state, RetryAfter: retry,
			Reason: "coordinator unavailable and the scope was last seen " + ks.state.String()}
	} else if b.cfg.failure == FailClosed {
		e = &OpenError{Scope: scope, State: coordinator.StateClosed, RetryAfter: retry,
			Reason: "coordinator unavailable (fail-closed)"}
	}
	verdict := coordinator.Allow
	if e != nil {
		verdict = coordinator.Reject
	}
	b.tel.decision(ctx, scope, verdict, by)
	coordinatorFailure(ctx, scope, verdict, by, b.cfg.failure, cause)
	if e != nil {
		rejected(ctx, e)
		return ticket{}, e
	}
	return ticket{scope: scope, unrecorded: dropUnadmitted}, nil
}

// admitsAll reports whether a state lets every call through: closed, or
// disabled by an operator. Such scopes are not remembered; isolated ones
// are, like open ones.
func admitsAll(s coordinator.State) bool {
	return s == coordinator.StateClosed || s == coordinator.StateDisabled
}

// mayAsk reports whether a call may ask the coordinator: yes while it
// works; during the back-off no; after it, one call at a time.
func (b *Breaker) mayAsk() bool {
	until := b.downUntil.Load()
	if until == 0 {
		return true
	}
	if time.Now().UnixNano() < until {
		return false
	}
	return b.trying.CompareAndSwap(false, true)
}

func (b *Breaker) backoffLeft() time.Duration {
	until := b.downUntil.Load()
	if until == 0 {
		return 0
	}
	return max(0, time.Until(time.Unix(0, until)))
}

func (b *Breaker) inBackoff() bool {
	until := b.downUntil.Load()
	return until != 0 && time.Now().UnixNano() < until
}

func (b *Breaker) failed() {
	b.downUntil.Store(time.Now().Add(b.cfg.backoff).UnixNano())
	b.trying.Store(false)
}

// failedOn starts the back-off after a coordinator error, unless the error
// concerns one scope's data only: the coordinator works for the others, so
// that scope alone is undecidable.
func (b *Breaker) failedOn(err error) {
	if errors.Is(err, coordinator.ErrCorruptState) {
		b.trying.Store(false)
		return
	}
	b.failed()
}

func (b *Breaker) recovered() {
	if b.downUntil.Load() != 0 {
		b.downUntil.Store(0)
	}
	b.trying.Store(false)
}

// call runs one coordinator operation within the coordinator timeout,
// retrying it once on a transport error when time is left: every operation
// is safe to repeat (the same claim, the same batch ID).
func (b *Breaker) call(ctx context.Context, scope, op string, wg *sync.WaitGroup, f func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, b.cfg.timeout)
	defer cancel()
	start := time.Now()
	err := attempt(ctx, wg, f)
	if err != nil && retryable(ctx, err) {
		err = attempt(ctx, wg, f)
	}
	b.tel.coordinatorCall(ctx, scope, op, time.Since(start), err)
	return err
}

// attempt runs f in a goroutine and stops waiting when ctx ends. A
// coordinator may not honour the deadline (go-redis reads the socket with
// its own ReadTimeout unless ContextTimeoutEnabled is set), and the bound
// must hold anyway; the goroutine finishes on its own, counted in wg so
// that Close can wait for it.
func attempt(ctx context.Context, wg *sync.WaitGroup, f func(context.Context) error) error {
	done := make(chan error, 1)
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer func() {
			// A coordinator that panics (a nil client, a bug) must not
			// take the process down from a goroutine no caller can guard:
			// it is a coordinator failure like any other.
			if r := recover(); r != nil {
				done <- fmt.Errorf("%w: %v", errCoordinatorPanic, r)
			}
		}()
		done <- f(ctx)
	}()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

var errCoordinatorPanic = errors.New("cbgrpc: the coordinator panicked")

// retryable reports whether an error looks like a transport failure worth
// one more try: not an invalid policy, and not the end of the time we had.
func retryable(ctx context.Context, err error) bool {
	return ctx.Err() == nil &&
		!errors.Is(err, coordinator.ErrInvalidPolicy) &&
		!errors.Is(err, errCoordinatorPanic) &&
		!errors.Is(err, coordinator.ErrCorruptState) &&
		!errors.Is(err, context.DeadlineExceeded) &&
		!errors.Is(err, context.Canceled)
}

func errorKind(err error) string {
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	case errors.Is(err, coordinator.ErrInvalidPolicy):
		return "invalid_policy"
	case errors.Is(err, coordinator.ErrCorruptState):
		return "corrupt_state"
	case errors.Is(err, context.Canceled):
		return "canceled"
	}
	return "error"
}
