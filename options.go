package cbgrpc

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/cbgrpc/cbgrpc/coordinator"
)

// Option configures a [Breaker]. Options are made by the With* functions
// of this package.
type Option interface{ apply(*config) }

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

// FailurePolicy says what happens to a call of a scope not known to be open
// while the coordinator cannot be reached. Scopes this process last saw open
// or half-open are rejected whatever the policy.
type FailurePolicy int

const (
	// FailOpen lets the call through, unprotected. The default: an
	// unreachable coordinator is no evidence that the dependency is in
	// trouble, and refusing every call would turn one outage into two.
	FailOpen FailurePolicy = iota
	// FailClosed rejects the call with [ErrOpen]: for calls where a burst
	// of unprotected traffic to a dependency on the edge would cost more
	// than refusing them.
	FailClosed
)

func (p FailurePolicy) String() string {
	switch p {
	case FailOpen:
		return "fail-open"
	case FailClosed:
		return "fail-closed"
	}
	return fmt.Sprintf("FailurePolicy(%d)", int(p))
}

const (
	// DefaultCoordinatorTimeout bounds each admission. A Redis script call
	// takes well under a millisecond in one zone, so 50ms is a hundred
	// times the normal round trip and only fires when the coordinator is
	// in trouble, while staying small beside the deadline of a typical RPC.
	DefaultCoordinatorTimeout = 50 * time.Millisecond
	// DefaultCoordinatorBackoff is how long calls decide without the
	// coordinator after it failed: a dead coordinator then costs one
	// timeout per second instead of one per call, and a recovered one is
	// used again within a second.
	DefaultCoordinatorBackoff = time.Second
	// DefaultRecordInterval is the longest a successful outcome waits to be
	// batched with others while its scope's window is not calm. Failures
	// are sent at once, and take the successes waiting with them, so a trip
	// is detected as early as with any interval. While the last answer
	// showed the window calm (each trip ratio under half its threshold),
	// successes alone wait up to five record intervals (a sixth of the
	// window at most): a healthy busy scope costs Redis one script every 5
	// s per replica at the default policy (see docs/redis.md, "What a fleet costs
	// Redis"). The window sees a calm replica's successes late, which can
	// only make the failure ratio look higher, by at most 1.2 times.
	DefaultRecordInterval = time.Second
	// DefaultQueueSize is how many outcomes of one scope may wait for the
	// recorder before new ones are dropped.
	DefaultQueueSize = 4096
	// DefaultAdmissionCacheMaxAge bounds how long a scope read closed from
	// the coordinator is admitted locally without asking again. A busy
	// scope is confirmed by every Record result (one per calm interval, 5 s
	// at most by default: twice that, so that a busy scope never waits for
	// a confirmation). A feed that dies without a word is found by its
	// heartbeats within 2 s, and then nothing is admitted locally until a
	// new feed follows the scope, so the bound matters only for a
	// transition that a working feed did not carry.
	DefaultAdmissionCacheMaxAge = 10 * time.Second

	// closeTimeout bounds Close. It exceeds go-redis's default ReadTimeout
	// (5s in v9.23) so that, with a default client, a coordinator call
	// stuck on a paused Redis has returned before Close does.
	closeTimeout = 10 * time.Second
)

type config struct {
	policy         coordinator.Policy
	scope          ScopeFunc
	excluded       methodSet
	classifier     Classifier
	failure        FailurePolicy
	timeout        time.Duration
	backoff        time.Duration
	recordInterval time.Duration
	queueSize      int
	scopeInMetrics bool
	name           string // cbgrpc.breaker in metrics; "": none
	named          bool   // WithName was given
	rejectedSpans  bool
	onTransition   func(coordinator.Transition)
	cacheMaxAge    time.Duration
	fallback       Fallback
	fallbackOn     bool // the fallback also serves failures
	pushback       *pushbackRule
	tp             trace.TracerProvider
	mp             metric.MeterProvider
	replica        string // this replica's ID (replica.go)
	// plainClassifier: classifier is DefaultClassifier, which cannot
	// panic (classify).
	plainClassifier bool
	dryRun          bool // rejects nothing (dryrun.go)
	// stallAfter is WithStallAfter's, when set (stall.go).
	stallAfter    time.Duration
	stallAfterSet bool
}

func newConfig(opts []Option) config {
	c := config{
		policy:         coordinator.DefaultPolicy(),
		scope:          ScopeByMethod,
		excluded:       make(methodSet),
		classifier:     DefaultClassifier,
		failure:        FailOpen,
		timeout:        DefaultCoordinatorTimeout,
		backoff:        DefaultCoordinatorBackoff,
		recordInterval: DefaultRecordInterval,
		queueSize:      DefaultQueueSize,
		rejectedSpans:  true,
		cacheMaxAge:    DefaultAdmissionCacheMaxAge,
		replica:        defaultReplicaID(),
	}
	for _, m := range defaultExcluded {
		c.excluded[m] = struct{}{}
	}
	for _, o := range opts {
		if o != nil {
			o.apply(&c)
		}
	}
	// Read the globals late, so that a provider set after New is imported
	// but before it is called is used.
	if c.tp == nil {
		c.tp = otel.GetTracerProvider()
	}
	if c.mp == nil {
		c.mp = otel.GetMeterProvider()
	}
	c.plainClassifier = reflect.ValueOf(c.classifier).Pointer() == reflect.ValueOf(Classifier(DefaultClassifier)).Pointer()
	return c
}

// validate reports the first setting that cannot work.
func (c *config) validate() error {
	if err := c.policy.Validate(); err != nil {
		return fmt.Errorf("cbgrpc: WithPolicy: %w", err)
	}
	if err := checkReplicaID(c.replica); err != nil {
		return err
	}
	if c.named && c.name == "" {
		return errors.New("cbgrpc: WithName: empty name; give each Breaker of a process a name of its own, or leave WithName out")
	}
	if c.failure != FailOpen && c.failure != FailClosed {
		return fmt.Errorf("cbgrpc: WithCoordinatorFailure: unknown policy %d; use FailOpen or FailClosed", int(c.failure))
	}
	if c.timeout <= 0 {
		return fmt.Errorf("cbgrpc: WithCoordinatorTimeout: must be positive, got %v", c.timeout)
	}
	if c.backoff < 0 {
		return fmt.Errorf("cbgrpc: WithCoordinatorBackoff: must not be negative, got %v", c.backoff)
	}
	if c.recordInterval <= 0 {
		return fmt.Errorf("cbgrpc: WithRecordInterval: must be positive, got %v", c.recordInterval)
	}
	if c.cacheMaxAge < 0 {
		return fmt.Errorf("cbgrpc: WithAdmissionCache: max age must be positive, or 0 to turn the cache off; got %v", c.cacheMaxAge)
	}
	if c.queueSize < 1 {
		return fmt.Errorf("cbgrpc: WithQueueSize: must be at least 1, got %d", c.queueSize)
	}
	for m := range c.excluded {
		if err := checkMethod("WithExcludedMethods", m); err != nil {
			return err
		}
	}
	if err := validStallAfter(c); err != nil {
		return err
	}
	return c.pushback.validate()
}

// checkMethod refuses, naming option, what is neither a full method
// ("/pkg.Service/Method") nor a whole service ("/pkg.Service/").
func checkMethod(option, m string) error {
	if !strings.HasPrefix(m, "/") || strings.Count(m, "/") != 2 {
		return fmt.Errorf("cbgrpc: %s: %q is neither a full method (\"/pkg.Service/Method\") nor a service (\"/pkg.Service/\")", option, m)
	}
	return nil
}

var errNilCoordinator = errors.New("cbgrpc: New: coordinator is nil; pass memory.New() for one process or redis.New(client) for a fleet")

// WithPolicy sets what trips the breaker and how it recovers, for every
// scope of this Breaker. The default is [coordinator.DefaultPolicy]. An
// invalid policy makes [New] fail with an error wrapping
// [coordinator.ErrInvalidPolicy] that names the field.
func WithPolicy(p coordinator.Policy) Option {
	return optionFunc(func(c *config) { c.policy = p })
}

// WithScope sets how calls are grouped into breakers. The default is
// [ScopeByMethod]; nil is ignored.
func WithScope(f ScopeFunc) Option {
	return optionFunc(func(c *config) {
		if f != nil {
			c.scope = f
		}
	})
}

// WithExcludedMethods leaves calls out of the breaker: they run without
// admission and their outcomes are not recorded. Each entry is a full
// method ("/pkg.Service/Method") or a whole service ("/pkg.Service/").
// The health service (grpc.health.v1.Health) and server reflection are
// always left out. A call that names its scope with [CallScope] is
// protected all the same.
func WithExcludedMethods(methods ...string) Option {
	return optionFunc(func(c *config) {
		for _, m := range methods {
			c.excluded[m] = struct{}{}
		}
	})
}

// WithClassifier sets which call results count as failures. The default is
// [DefaultClassifier]; nil is ignored.
func WithClassifier(f Classifier) Option {
	return optionFunc(func(c *config) {
		if f != nil {
			c.classifier = f
		}
	})
}

// WithCoordinatorFailure sets what happens to calls of scopes not known to
// be open while the coordinator cannot be reached: [FailOpen] (the default)
// or [FailClosed].
func WithCoordinatorFailure(p FailurePolicy) Option {
	return optionFunc(func(c *config) { c.failure = p })
}

// WithCoordinatorTimeout bounds how long a call waits for its admission,
// and each Record or Settle; and how long the calls of a replica whose own
// calls failed in a row as often as trips a rule wait for the
// coordinator's verdict on it. The default is [DefaultCoordinatorTimeout].
// The bound holds even when the coordinator ignores context deadlines (a
// go-redis client without ContextTimeoutEnabled): the call stops waiting
// and the coordinator's answer, when it comes, is discarded.
func WithCoordinatorTimeout(d time.Duration) Option {
	return optionFunc(func(c *config) { c.timeout = d })
}

// WithCoordinatorBackoff sets how long calls skip the coordinator after an
// admission failed or timed out, deciding by the failure policy instead.
// After the back-off one call asks the coordinator again. (A failed Record
// or Settle starts no back-off: no call waited for it.) The default is
// [DefaultCoordinatorBackoff]; zero asks again at once.
func WithCoordinatorBackoff(d time.Duration) Option {
	return optionFunc(func(c *config) { c.backoff = d })
}

// WithRecordInterval sets how long successful outcomes may wait to be sent
// together. A failure is sent as soon as no other Record of its scope is in
// flight. While the scope's window is calm (each trip ratio under half its
// threshold), successes alone wait up to five times d, and at most a sixth
// of the policy's window. The default is [DefaultRecordInterval].
func WithRecordInterval(d time.Duration) Option {
	return optionFunc(func(c *config) { c.recordInterval = d })
}

// WithQueueSize sets how many outcomes of one scope may wait for the
// recorder; beyond it, outcomes are dropped and counted. A scope sends a
// batch without waiting for the record interval once half of it waits
// (2048 at most). The default is [DefaultQueueSize].
func WithQueueSize(n int) Option {
	return optionFunc(func(c *config) { c.queueSize = n })
}

// WithAdmissionCache sets how long this process may admit a scope it knows
// to be closed without asking the coordinator again; 0 turns the cache off,
// so that every admission asks (one round trip per call). The default is
// [DefaultAdmissionCacheMaxAge].
//
// The cache works only over a coordinator that publishes its transitions
// ([coordinator.Watcher]; both coordinators of this module do). What the
// process knows of each scope is one table, fed by every answer of the
// coordinator and by the feed, and ordered by generation. While the feed is
// connected, a scope known closed is admitted locally and a scope known open
// is rejected locally until its open period ends; half-open always asks the
// coordinator. A trip made anywhere in the fleet reaches the cache over the
// feed within a few milliseconds. What it trades: calls admitted between a
// trip and the moment its news arrives go through (their outcomes are stale
// and change nothing), and if the feed dies without an error this process
// may admit a tripped scope until it finds out: the Redis coordinator's
// heartbeats report such a feed lost within 2 s; a coordinator without them
// leaves maxAge (or the next Record result) as the bound. When the feed breaks, or from a coordinator error
// until a coordinator call succeeds, nothing is answered locally.
func WithAdmissionCache(maxAge time.Duration) Option {
	return optionFunc(func(c *config) { c.cacheMaxAge = maxAge })
}

// WithScopeInMetrics adds the scope as the attribute cbgrpc.scope to every
// metric. Off by default: the number of scopes is in the user's hands
// (a scope per method of every target), and each one multiplies the
// number of time series.
func WithScopeInMetrics() Option {
	return optionFunc(func(c *config) { c.scopeInMetrics = true })
}

// WithName names the Breaker in its metrics, as the attribute
// cbgrpc.breaker on every one, so that the series of several Breakers in
// one process stay apart: the cbgrpc.state gauge of two unnamed Breakers
// would report the same series twice. Without it, metrics carry no
// cbgrpc.breaker. The name must not be empty.
func WithName(name string) Option {
	return optionFunc(func(c *config) { c.name, c.named = name, true })
}

// WithRejectedCallSpans sets whether a rejected call gets a short client
// span of its own, named "pkg.Service/Method" like otelgrpc v0.72's and
// with the same attributes (rpc.system.name, rpc.method, server.address,
// server.port, rpc.response.status_code UNAVAILABLE and an error status),
// plus the rejection's cbgrpc.* attributes. On by default: the breaker runs above otelgrpc's
// stats handler, so without it a rejected call, never sent, shows in no
// trace. Off, a rejection is still an event on the caller's span.
func WithRejectedCallSpans(on bool) Option {
	return optionFunc(func(c *config) { c.rejectedSpans = on })
}

// WithOnTransition calls f with every breaker transition this process
// learns of: those its own coordinator calls make (admissions, Records,
// probe settlements, an operator's command through [Breaker.Isolate] and
// the like) and those the coordinator's transition feed reports from the
// rest of the fleet (the feed runs while the admission cache is on; see
// [WithAdmissionCache]). nil is ignored.
//
// f runs in a goroutine of its own, never on a call's path, one transition
// at a time. Delivery is at least once per process: a transition heard
// both as an answer and from the feed is passed once when the two arrive
// close together, but may be passed twice. Transitions arrive in the
// order this process learns of them, which may differ from the order they
// were made, across scopes and, rarely, within one: order a scope's
// transitions by Generation. A callback more than 1024 transitions behind
// loses the newer ones, each reported to the OpenTelemetry error handler
// (otel.Handle), as is a panic of f, which is recovered. f is not called
// after [Breaker.Close] returns: Close delivers the transitions still
// queued, waiting for f up to its own time limit.
func WithOnTransition(f func(coordinator.Transition)) Option {
	return optionFunc(func(c *config) {
		if f != nil {
			c.onTransition = f
		}
	})
}

// WithTracerProvider sets where transition and rejected-call spans go. The
// default is the global provider (otel.GetTracerProvider); nil is ignored.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return optionFunc(func(c *config) {
		if tp != nil {
			c.tp = tp
		}
	})
}

// WithMeterProvider sets where metrics go. The default is the global
// provider (otel.GetMeterProvider); nil is ignored.
func WithMeterProvider(mp metric.MeterProvider) Option {
	return optionFunc(func(c *config) {
		if mp != nil {
			c.mp = mp
		}
	})
}
