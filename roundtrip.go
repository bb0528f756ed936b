package cbgrpc

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/cbgrpc/cbgrpc/coordinator"
	"github.com/cbgrpc/cbgrpc/internal/instant"
)

// answer is what any coordinator call, or the feed, says about its scope.
type answer struct {
	state      coordinator.State
	gen        uint64
	retryAfter time.Duration // open, or isolated for a set time: until it ends
	rampLeft   time.Duration // closed after a recovery: what is left of the ramp (Policy.RampFor)
	transition *coordinator.Transition
	stale      int // outcomes of a Record that changed nothing
	// window is what a Record that counted says of the fleet's window, to
	// pace the next one by (pace.go) and to throttle by (throttle.go).
	window window
	// policyVersion is the version of the scope's override, when
	// saysPolicy: every coordinator answer says it, the feed does not.
	policyVersion uint64
	saysPolicy    bool
	// outlier is what a Record's answer says of this replica as an
	// outlier of the scope (outlier.go), when saysOutlier.
	outlier     *coordinator.Outlier
	saysOutlier bool
	// cause is the traceparent of the span that recorded the transition
	// into the state (cause.go): "" when the answer has none.
	cause string
	// hint: the feed said it, which anyone allowed to publish on its
	// channels can (docs/redis-acl.md); the table believes it for a while
	// only (knowledge.learn).
	hint bool
}

// window is what a Record that counted says of the scope's shared window
// (coordinator.Result): all zero from any other answer.
type window struct {
	calls, failures, slow, throttled int
}

func decided(d coordinator.Decision) answer {
	return answer{state: d.State, gen: d.Generation, retryAfter: d.RetryAfter, rampLeft: d.RampLeft, transition: d.Transition,
		policyVersion: d.PolicyVersion, saysPolicy: true, cause: d.Cause}
}

// recordedAnswer is the answer of a Record, which also says whether this
// replica is an outlier.
func recordedAnswer(r coordinator.Result) answer {
	a := resulted(r)
	a.outlier, a.saysOutlier = r.Outlier, true
	return a
}

func resulted(r coordinator.Result) answer {
	return answer{state: r.State, gen: r.Generation, retryAfter: r.RetryAfter, rampLeft: r.RampLeft, transition: r.Transition, stale: r.Stale,
		window:        window{calls: r.Calls, failures: r.Failures, slow: r.Slow, throttled: r.Throttled},
		policyVersion: r.PolicyVersion, saysPolicy: true, cause: r.Cause}
}

// heard is what a transition on the feed says. Its open period, and the
// ramp (rampFor) that a recovery starts, are counted from when it was
// heard, not from t.At: the coordinator's clock may be skewed from ours.
func heard(t coordinator.Transition, rampFor time.Duration) answer {
	a := answer{state: t.To, gen: t.Generation, hint: true}
	if !t.OpenUntil.IsZero() {
		a.retryAfter = t.OpenUntil.Sub(t.At)
	}
	if recovered(t) {
		a.rampLeft = rampFor
	}
	return a
}

// recovered reports whether t closes a breaker that was open, half-open or
// isolated: what starts a ramp.
func recovered(t coordinator.Transition) bool {
	return t.To == coordinator.StateClosed && t.From != coordinator.StateClosed && t.From != coordinator.StateDisabled
}

// exchange describes one coordinator round trip. (A trip is what opens a
// breaker; the word is kept for that.)
type exchange struct {
	op      string
	scope   string
	timeout time.Duration
	// wg counts the goroutine the call runs in, so that Close can wait
	// for a coordinator that ignores deadlines.
	wg *sync.WaitGroup
	// admission: a call waits for this one, so its failure starts the
	// back-off (see health.failed).
	admission bool
	// cause, when set, names the call that caused a transition of the
	// answer, whose span is the transition span's parent, and the calls
	// the span links to. Unset, the parent is ctx's span: the call the
	// round trip is made for, or an operator's command.
	cause func(answer) (trace.SpanContext, []trace.Link)
	// mute: the answer says nothing of the scope's state (keeping a
	// cause, cause.go), so the table learns nothing from it.
	mute bool
}

// roundTrip makes every coordinator call of the Breaker: within the
// timeout (even over a coordinator that ignores deadlines), with a panic
// of the coordinator turned into an error, retried once on a transport
// error (every operation is safe to repeat: the same claim, the same batch
// ID), timed and counted, and its answer learned by the table and its
// transition traced and passed to the callback. It tells the coordinator
// the generation the table holds, so that one that lost state (a failover
// that rolled it back) starts above it rather than hand out what came
// before again: f gets it, for its request's Seen. ctx is the caller's:
// when it ends first, the caller gave up and the coordinator is not to
// blame.
func (b *Breaker) roundTrip(ctx context.Context, t exchange, f func(ctx context.Context, seen uint64) (answer, error)) (answer, error) {
	epoch, seen := b.known.begin(t.scope)
	cctx, cancel := context.WithTimeout(ctx, t.timeout)
	defer cancel()
	call := func(ctx context.Context) (answer, error) { return f(ctx, seen) }
	start := time.Now()
	a, err := b.attempt(cctx, t.wg, call)
	if err != nil && retryable(cctx, err) {
		a, err = b.attempt(cctx, t.wg, call)
	}
	err = b.kinded(err)
	b.tel.coordinatorCall(ctx, t.scope, t.op, time.Since(start), err)
	if err != nil {
		if ctx.Err() != nil {
			b.health.Abandoned()
		} else {
			b.health.Failed(err, t.admission)
			b.complain(err)
		}
		return answer{}, err
	}
	b.health.Succeeded()
	if t.mute {
		return a, nil
	}
	b.known.learn(epoch, t.scope, a, instant.Now())
	if a.transition != nil {
		parent := ctx
		var links []trace.Link
		if t.cause != nil {
			var sc trace.SpanContext
			sc, links = t.cause(a)
			parent = trace.ContextWithSpanContext(ctx, sc)
		}
		b.caused(t.wg, a.transition, b.tel.transition(parent, a.transition, links))
		b.notify.tell(*a.transition, true)
	}
	return a, nil
}

type attempted struct {
	a   answer
	err error
}

// attempt runs f and stops waiting when ctx ends. A coordinator may not
// honour the deadline (go-redis reads the socket with its own ReadTimeout
// unless ContextTimeoutEnabled is set), and the bound must hold anyway:
// unless the coordinator says it honours deadlines (coordinator.Bounded,
// b.inline), f runs in a goroutine that finishes on its own, counted in
// wg. Inline, a call saves the goroutine and the hand-off between two,
// the larger part of what the strict path cost beyond its round trip.
func (b *Breaker) attempt(ctx context.Context, wg *sync.WaitGroup, f func(context.Context) (answer, error)) (answer, error) {
	if b.inline {
		return guarded(ctx, f)
	}
	done := make(chan attempted, 1)
	wg.Add(1)
	go func() {
		defer wg.Done()
		a, err := guarded(ctx, f)
		done <- attempted{a, err}
	}()
	select {
	case r := <-done:
		return r.a, r.err
	case <-ctx.Done():
		return answer{}, ctx.Err()
	}
}

// guarded runs f, turning a panic into an error: a coordinator that panics
// (a nil client, a bug) must not take the process down, least of all from
// a goroutine no caller can guard; it is a coordinator failure like any
// other.
func guarded(ctx context.Context, f func(context.Context) (answer, error)) (a answer, err error) {
	defer func() {
		if r := recover(); r != nil {
			a, err = answer{}, fmt.Errorf("%w: %v", errCoordinatorPanic, r)
		}
	}()
	return f(ctx)
}

var errCoordinatorPanic = errors.New("cbgrpc: the coordinator panicked")

// retryable reports whether an error looks like a transport failure worth
// one more try: not an invalid policy or note, not one scope's broken data,
// and not the end of the time we had.
func retryable(ctx context.Context, err error) bool {
	return ctx.Err() == nil &&
		!errors.Is(err, coordinator.ErrInvalidPolicy) &&
		!errors.Is(err, coordinator.ErrInvalidNote) &&
		!errors.Is(err, errCoordinatorPanic) &&
		!errors.Is(err, coordinator.ErrCorruptState) &&
		!errors.Is(err, context.DeadlineExceeded) &&
		!errors.Is(err, context.Canceled)
}

// errorKind is the error.type of err: the Breaker's own kinds first,
// then the coordinator's (kinded), else "error".
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
	var k *kindError
	if errors.As(err, &k) {
		return k.kind
	}
	return "error"
}
