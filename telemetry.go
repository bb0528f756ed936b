package cbgrpc

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/cbgrpc/cbgrpc/coordinator"
)

// instrumentationName is the OpenTelemetry instrumentation scope of the
// tracer and meter: the module path.
const instrumentationName = "github.com/cbgrpc/cbgrpc"

// Attribute keys, in our own namespace.
const (
	attrScope      = attribute.Key("cbgrpc.scope")
	attrFrom       = attribute.Key("cbgrpc.state.from")
	attrTo         = attribute.Key("cbgrpc.state.to")
	attrGeneration = attribute.Key("cbgrpc.generation")
	attrReason     = attribute.Key("cbgrpc.reason")
	attrState      = attribute.Key("cbgrpc.state")
	attrRetryAfter = attribute.Key("cbgrpc.retry_after_ms")
	attrVerdict    = attribute.Key("cbgrpc.verdict")
	attrSource     = attribute.Key("cbgrpc.decided_by")
	attrOperation  = attribute.Key("cbgrpc.operation")
	attrError      = attribute.Key("cbgrpc.error")
	attrPolicy     = attribute.Key("cbgrpc.failure_policy")
)

// Who decided an admission.
const (
	byCoordinator   = "coordinator"    // the coordinator answered
	byKnownState    = "known_state"    // coordinator unavailable, scope last seen not closed
	byFailurePolicy = "failure_policy" // coordinator unavailable, FailOpen or FailClosed
	byCache         = "cache"          // answered locally from what the coordinator and its feed said
)

// Why an outcome or settlement was not delivered.
const (
	dropQueueFull   = "queue_full"
	dropCoordinator = "coordinator_error"
	dropBackoff     = "coordinator_backoff"
	dropClosed      = "closed"
	dropUnadmitted  = "not_admitted" // let through by the failure policy: no generation to record under
)

// Span and event names.
const (
	spanTransition          = "cbgrpc.transition"
	eventRejected           = "cbgrpc.rejected"
	eventCoordinatorFailure = "cbgrpc.coordinator_unavailable"
)

// maxLinks caps the links of one transition span: the calls of a batch
// that tripped a busy scope can number thousands; a few show the cause.
const maxLinks = 32

type telemetry struct {
	tracer         trace.Tracer
	scopeInMetrics bool

	decisions   metric.Int64Counter
	transitions metric.Int64Counter
	dropped     metric.Int64Counter
	latency     metric.Float64Histogram
	errors      metric.Int64Counter
	feedLosses  metric.Int64Counter

	// plain holds the options of decisions without the scope, made once
	// (the slice too): the cached admission path must not allocate per
	// call. plainOps does the same for the latency of each coordinator
	// operation, on the path of every admission that asks.
	plain    map[decisionKey][]metric.AddOption
	plainOps map[string][]metric.RecordOption
}

type decisionKey struct {
	v  coordinator.Verdict
	by string
}

func newTelemetry(c *config) (*telemetry, error) {
	t := &telemetry{
		tracer:         c.tp.Tracer(instrumentationName),
		scopeInMetrics: c.scopeInMetrics,
	}
	m := c.mp.Meter(instrumentationName)
	var err error
	if t.decisions, err = m.Int64Counter("cbgrpc.decisions",
		metric.WithDescription("Admissions of protected calls, by verdict and by who decided."),
		metric.WithUnit("{call}")); err != nil {
		return nil, err
	}
	if t.transitions, err = m.Int64Counter("cbgrpc.transitions",
		metric.WithDescription("Breaker transitions caused by this process's coordinator calls."),
		metric.WithUnit("{transition}")); err != nil {
		return nil, err
	}
	if t.dropped, err = m.Int64Counter("cbgrpc.outcomes.dropped",
		metric.WithDescription("Outcomes and probe settlements that were never delivered to the coordinator."),
		metric.WithUnit("{outcome}")); err != nil {
		return nil, err
	}
	if t.latency, err = m.Float64Histogram("cbgrpc.coordinator.duration",
		metric.WithDescription("Duration of coordinator operations, as the caller waited for them."),
		metric.WithUnit("s"),
		metric.WithExplicitBucketBoundaries(0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1)); err != nil {
		return nil, err
	}
	if t.errors, err = m.Int64Counter("cbgrpc.coordinator.errors",
		metric.WithDescription("Coordinator operations that failed or timed out."),
		metric.WithUnit("{operation}")); err != nil {
		return nil, err
	}
	if t.feedLosses, err = m.Int64Counter("cbgrpc.feed.losses",
		metric.WithDescription("Times the coordinator's transition feed could not be opened or broke; the admission cache is dropped each time."),
		metric.WithUnit("{loss}")); err != nil {
		return nil, err
	}
	t.plainOps = make(map[string][]metric.RecordOption)
	for _, op := range []string{"admit", "record", "settle", "isolate", "release", "disable", "enable"} {
		t.plainOps[op] = []metric.RecordOption{metric.WithAttributes(attrOperation.String(op))}
	}
	t.plain = make(map[decisionKey][]metric.AddOption)
	for _, v := range []coordinator.Verdict{coordinator.Allow, coordinator.Probe, coordinator.Reject} {
		for _, by := range []string{byCoordinator, byKnownState, byFailurePolicy, byCache} {
			t.plain[decisionKey{v, by}] = []metric.AddOption{metric.WithAttributes(attrVerdict.String(v.String()), attrSource.String(by))}
		}
	}
	return t, nil
}

// attrs returns kvs, plus the scope when the user asked for it.
func (t *telemetry) attrs(scope string, kvs ...attribute.KeyValue) metric.MeasurementOption {
	if t.scopeInMetrics {
		kvs = append(kvs, attrScope.String(scope))
	}
	return metric.WithAttributes(kvs...)
}

func (t *telemetry) decision(ctx context.Context, scope string, v coordinator.Verdict, by string) {
	if !t.scopeInMetrics {
		t.decisions.Add(ctx, 1, t.plain[decisionKey{v, by}]...)
		return
	}
	t.decisions.Add(ctx, 1, t.attrs(scope, attrVerdict.String(v.String()), attrSource.String(by)))
}

func (t *telemetry) feedLost(ctx context.Context, err error) {
	t.feedLosses.Add(ctx, 1, metric.WithAttributes(attrError.String(errorKind(err))))
}

func (t *telemetry) drop(scope, reason string, n int) {
	t.dropped.Add(context.Background(), int64(n), t.attrs(scope, attrReason.String(reason)))
}

func (t *telemetry) coordinatorCall(ctx context.Context, scope, op string, d time.Duration, err error) {
	if opts, ok := t.plainOps[op]; ok && !t.scopeInMetrics {
		t.latency.Record(ctx, d.Seconds(), opts...)
	} else {
		t.latency.Record(ctx, d.Seconds(), t.attrs(scope, attrOperation.String(op)))
	}
	if err != nil {
		t.errors.Add(ctx, 1, t.attrs(scope, attrOperation.String(op), attrError.String(errorKind(err))))
	}
}

// transition emits the span of one transition this process caused: a child
// of parent's span, linked to links.
func (t *telemetry) transition(parent context.Context, tr *coordinator.Transition, links []trace.Link) {
	t.transitions.Add(parent, 1, t.attrs(tr.Scope, attrFrom.String(tr.From.String()), attrTo.String(tr.To.String())))
	_, span := t.tracer.Start(parent, spanTransition,
		trace.WithSpanKind(trace.SpanKindInternal),
		trace.WithLinks(links...),
		trace.WithAttributes(
			attrScope.String(tr.Scope),
			attrFrom.String(tr.From.String()),
			attrTo.String(tr.To.String()),
			attrGeneration.Int64(int64(tr.Generation)),
			attrReason.String(tr.Reason),
		))
	span.End()
}

// rejected adds an event to the caller's span, when it records.
func rejected(ctx context.Context, e *OpenError) {
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return
	}
	span.AddEvent(eventRejected, trace.WithAttributes(
		attrScope.String(e.Scope),
		attrState.String(e.State.String()),
		attrRetryAfter.Int64(e.RetryAfter.Milliseconds()),
		attrReason.String(e.Reason),
	))
}

// coordinatorFailure adds an event to the caller's span for a call decided
// without the coordinator.
func coordinatorFailure(ctx context.Context, scope string, v coordinator.Verdict, by string, p FailurePolicy, cause error) {
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return
	}
	kvs := []attribute.KeyValue{
		attrScope.String(scope),
		attrVerdict.String(v.String()),
		attrSource.String(by),
		attrPolicy.String(p.String()),
	}
	if cause != nil {
		kvs = append(kvs, attrError.String(cause.Error()))
	}
	span.AddEvent(eventCoordinatorFailure, trace.WithAttributes(kvs...))
}
