package cbgrpc

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	otelcodes "go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/cbgrpc/cbgrpc/coordinator"
	"github.com/cbgrpc/cbgrpc/internal/instant"
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
	attrPolicy     = attribute.Key("cbgrpc.failure_policy")
	attrReplica    = attribute.Key("cbgrpc.replica")
	attrOutlier    = attribute.Key("cbgrpc.outlier")
	attrBreaker    = attribute.Key("cbgrpc.breaker")
	attrCaused     = attribute.Key("cbgrpc.caused")
)

// decider is who decided an admission.
type decider int8

const (
	byCoordinator   decider = iota // the coordinator answered
	byCache                        // answered locally from what the coordinator and its feed said
	byKnownState                   // coordinator unavailable, scope last seen not closed
	byFailurePolicy                // coordinator unavailable, FailOpen or FailClosed
	byRamp                         // closed, but ramping up after a recovery (ramp.go)
	byThrottle                     // closed, but throttled adaptively (throttle.go)
	byOutlier                      // this replica alone is failing (outlier.go)
	byDryRun                       // let through by a dry run that would have rejected it (dryrun.go)
	deciders
)

func (d decider) String() string {
	return [deciders]string{"coordinator", "cache", "known_state", "failure_policy", "ramp", "throttle", "outlier", "dry_run"}[d]
}

// Why an outcome or settlement was not delivered.
const (
	dropQueueFull   = "queue_full"
	dropCoordinator = "coordinator_error"
	dropBackoff     = "coordinator_backoff"
	dropClosed      = "closed"
	dropUnadmitted  = "not_admitted" // let through by the failure policy: no generation to record under
)

var dropReasons = []string{dropQueueFull, dropCoordinator, dropBackoff, dropClosed, dropUnadmitted}

// Span and event names.
const (
	spanTransition          = "cbgrpc.transition"
	eventRejected           = "cbgrpc.rejected"
	eventDryRun             = "cbgrpc.dry_run"
	eventCoordinatorFailure = "cbgrpc.coordinator_unavailable"
)

// maxLinks caps the links of one transition span: the calls of a batch
// that tripped a busy scope can number thousands; a few show the cause.
const maxLinks = 32

type telemetry struct {
	tracer         trace.Tracer
	scopeInMetrics bool
	// base is what every metric carries: the Breaker's name, if any.
	base []attribute.KeyValue

	rejectedSpans bool
	// dryRun: a rejection is a call let through (dryrun.go), counted as
	// allowed by the dry run and marked with its own event.
	dryRun bool

	decisions   metric.Int64Counter
	transitions metric.Int64Counter
	dropped     metric.Int64Counter
	latency     metric.Float64Histogram
	errors      metric.Int64Counter
	feedLosses  metric.Int64Counter
	stallsSent  metric.Int64Counter
	// states is observed from the table at each collection, until
	// observing is unregistered.
	states    metric.Int64ObservableGauge
	outliers  metric.Int64ObservableGauge
	observing metric.Registration
	// byState holds the options of the state gauge without the scope, one
	// per state, made once for every collection.
	byState []metric.ObserveOption

	// methods holds the attributes of each method and the options of its
	// decisions (semconv.go). plainOps holds the options of the latency of
	// each coordinator operation, made once: on the path of every
	// admission that asks, they must not allocate per call.
	methods  rpcMethods
	plainOps map[string][]metric.RecordOption
	// plainDrops does the same for each reason of a drop: a busy scope
	// that outruns the recorder drops on the calls' path.
	plainDrops map[string][]metric.AddOption
}

// newTelemetry makes the tracer and the instruments, and observes the
// state of every scope of k.
func newTelemetry(c *config, k *knowledge) (*telemetry, error) {
	t := &telemetry{
		tracer:         c.tp.Tracer(instrumentationName),
		scopeInMetrics: c.scopeInMetrics,
		rejectedSpans:  c.rejectedSpans,
		dryRun:         c.dryRun,
	}
	if c.name != "" {
		t.base = []attribute.KeyValue{attrBreaker.String(c.name)}
	}
	m := c.mp.Meter(instrumentationName)
	var err error
	if t.decisions, err = m.Int64Counter("cbgrpc.decisions",
		metric.WithDescription("Admissions of protected calls, by verdict, by who decided, and by gRPC method."),
		metric.WithUnit("{call}")); err != nil {
		return nil, err
	}
	if t.transitions, err = m.Int64Counter("cbgrpc.transitions",
		metric.WithDescription("Breaker transitions this process learned of, once each: from its own coordinator calls (cbgrpc.caused true) or from the transition feed."),
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
	if t.stallsSent, err = m.Int64Counter("cbgrpc.stalls",
		metric.WithDescription("Calls this replica reported to the coordinator as stalled: still running past how long the scope's calls take when healthy. Each counts there as a failure; cbgrpc.decisions does not count them again."),
		metric.WithUnit("{call}")); err != nil {
		return nil, err
	}
	if t.states, err = m.Int64ObservableGauge("cbgrpc.state",
		metric.WithDescription("Breakers this process used in the last window, by state (cbgrpc.state), as it knows them; with the scope, 1 for the state each is in and 0 for the others."),
		metric.WithUnit("{breaker}")); err != nil {
		return nil, err
	}
	if t.outliers, err = m.Int64ObservableGauge("cbgrpc.outlier",
		metric.WithDescription("1 for each breaker of which the coordinator found this replica an outlier: failing alone, it rejects its own calls while the fleet's breaker is closed."),
		metric.WithUnit("{breaker}")); err != nil {
		return nil, err
	}
	for s := range stateCount {
		t.byState = append(t.byState, metric.WithAttributes(append([]attribute.KeyValue{attrState.String(s.String())}, t.base...)...))
	}
	if t.observing, err = m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		t.observeStates(o, k)
		k.outliers(func(scope string) {
			o.ObserveInt64(t.outliers, 1, metric.WithAttributes(append([]attribute.KeyValue{attrScope.String(scope)}, t.base...)...))
		})
		return nil
	}, t.states, t.outliers); err != nil {
		return nil, err
	}
	t.plainOps = make(map[string][]metric.RecordOption)
	for _, op := range operations {
		t.plainOps[op] = []metric.RecordOption{metric.WithAttributes(append([]attribute.KeyValue{attrOperation.String(op)}, t.base...)...)}
	}
	t.plainDrops = make(map[string][]metric.AddOption)
	for _, reason := range dropReasons {
		t.plainDrops[reason] = []metric.AddOption{metric.WithAttributes(append([]attribute.KeyValue{attrReason.String(reason)}, t.base...)...)}
	}
	t.methods.init(t.base)
	return t, nil
}

// operations are the values of cbgrpc.operation: every coordinator call
// the Breaker makes (trip.op), its metric options made once.
// TestEveryOperationIsListed holds the code to this list.
var operations = []string{"admit", "record", "settle", "push", "isolate", "release", "disable", "enable", "snapshot", "list", "keep_cause"}

// stop ends what telemetry does on its own: observing the table.
func (t *telemetry) stop() error { return t.observing.Unregister() }

// attrs returns kvs and the Breaker's name, plus the scope when the user
// asked for it.
func (t *telemetry) attrs(scope string, kvs ...attribute.KeyValue) metric.MeasurementOption {
	kvs = append(kvs, t.base...)
	if t.scopeInMetrics {
		kvs = append(kvs, attrScope.String(scope))
	}
	return metric.WithAttributes(kvs...)
}

// stateCount is how many states there are, from closed to disabled.
const stateCount = coordinator.StateDisabled + 1

// observeStates observes the state gauge as a state set: with the scope,
// each scope k knows has a point per state, 1 for the one it is in and 0
// for the others; without, a point per state counts the scopes in it.
// Either way a sum or a max by state means what it says.
func (t *telemetry) observeStates(o metric.Observer, k *knowledge) {
	if !t.scopeInMetrics {
		var n [stateCount]int64
		k.states(instant.Now(), func(_ string, s coordinator.State) {
			if s < stateCount {
				n[s]++
			}
		})
		for s := range stateCount {
			o.ObserveInt64(t.states, n[s], t.byState[s])
		}
		return
	}
	k.states(instant.Now(), func(scope string, in coordinator.State) {
		for s := range stateCount {
			var v int64
			if s == in {
				v = 1
			}
			o.ObserveInt64(t.states, v, metric.WithAttributes(append([]attribute.KeyValue{attrState.String(s.String()), attrScope.String(scope)}, t.base...)...))
		}
	})
}

// decision counts one admission of c. A dry run's rejection counts as a
// call its dry run let through.
func (t *telemetry) decision(ctx context.Context, c *call, v coordinator.Verdict, by decider) {
	if t.dryRun && v == coordinator.Reject {
		v, by = coordinator.Allow, byDryRun
	}
	m := c.rpc
	if !t.scopeInMetrics && v >= 0 && int(v) < len(m.decisions) {
		t.decisions.Add(ctx, 1, m.decisions[v][by]...)
		return
	}
	kvs := []attribute.KeyValue{attrVerdict.String(v.String()), attrSource.String(by.String())}
	if t.scopeInMetrics {
		kvs = append(kvs, attrScope.String(c.scope))
	}
	// m.attrs carries the Breaker's name already.
	t.decisions.Add(ctx, 1, metric.WithAttributes(append(kvs, m.attrs...)...))
}

func (t *telemetry) feedLost(ctx context.Context, err error) {
	t.feedLosses.Add(ctx, 1, metric.WithAttributes(append([]attribute.KeyValue{semconv.ErrorTypeKey.String(errorKind(err))}, t.base...)...))
}

// stalls counts n calls of scope reported stalled.
func (t *telemetry) stalls(scope string, n int64) {
	t.stallsSent.Add(context.Background(), n, t.attrs(scope))
}

func (t *telemetry) drop(scope, reason string, n int) {
	if opts, ok := t.plainDrops[reason]; ok && !t.scopeInMetrics {
		t.dropped.Add(context.Background(), int64(n), opts...)
		return
	}
	t.dropped.Add(context.Background(), int64(n), t.attrs(scope, attrReason.String(reason)))
}

func (t *telemetry) coordinatorCall(ctx context.Context, scope, op string, d time.Duration, err error) {
	if opts, ok := t.plainOps[op]; ok && !t.scopeInMetrics {
		t.latency.Record(ctx, d.Seconds(), opts...)
	} else {
		t.latency.Record(ctx, d.Seconds(), t.attrs(scope, attrOperation.String(op)))
	}
	if err != nil {
		t.errors.Add(ctx, 1, t.attrs(scope, attrOperation.String(op), semconv.ErrorTypeKey.String(errorKind(err))))
	}
}

// learned counts one transition this process learned of (notify.go),
// whether its own coordinator call caused it or the feed told of it. A
// transition of this replica alone (an outlier's) says so, with
// cbgrpc.outlier.
func (t *telemetry) learned(tr coordinator.Transition, caused bool) {
	t.transitions.Add(context.Background(), 1, t.attrs(tr.Scope, attrFrom.String(tr.From.String()), attrTo.String(tr.To.String()),
		attrOutlier.Bool(tr.Replica != ""), attrCaused.Bool(caused)))
}

// transition emits the span of one transition this process caused: a child
// of parent's span (a root span when it has none), linked to links.
// A transition of this replica alone (an outlier's) carries the replica's
// ID. It returns the span's context when the span records, the cause of
// the state the transition moved to (cause.go); else the zero one.
func (t *telemetry) transition(parent context.Context, tr *coordinator.Transition, links []trace.Link) trace.SpanContext {
	kvs := []attribute.KeyValue{
		attrScope.String(tr.Scope),
		attrFrom.String(tr.From.String()),
		attrTo.String(tr.To.String()),
		attrGeneration.Int64(int64(tr.Generation)),
		attrReason.String(tr.Reason),
	}
	if tr.Replica != "" {
		kvs = append(kvs, attrReplica.String(tr.Replica))
	}
	_, span := t.tracer.Start(parent, spanTransition,
		trace.WithSpanKind(trace.SpanKindInternal),
		trace.WithLinks(links...),
		trace.WithAttributes(kvs...))
	// A span that does not record (no SDK, or not sampled) leads nowhere;
	// once ended, none records.
	recording := span.IsRecording()
	span.End()
	if !recording {
		return trace.SpanContext{}
	}
	return span.SpanContext()
}

// rejected shows the rejected call c where a tracing user looks: an event
// on the caller's span when it records, and a short client span of the
// call's own, named and attributed as otelgrpc's client span of the call
// would be, from when the call began. The breaker runs above otelgrpc's stats handler, which never
// sees a call that is not sent: without this span a rejection would be
// missing from the traces that show every other call. Both link to cause,
// when valid: the span that recorded the transition behind the rejection,
// in whichever replica's trace (cause.go).
func (t *telemetry) rejected(ctx context.Context, c *call, e *OpenError, by decider, cause trace.SpanContext) {
	kvs := []attribute.KeyValue{
		attrScope.String(e.Scope),
		attrState.String(e.State.String()),
		attrRetryAfter.Int64(e.RetryAfter.Milliseconds()),
		attrReason.String(e.Reason),
		attrSource.String(by.String()),
	}
	var links []trace.Link
	if cause.IsValid() {
		links = []trace.Link{{SpanContext: cause}}
	}
	event := eventRejected
	if t.dryRun {
		// The call goes on, traced as any other: no span of its own.
		event = eventDryRun
	}
	if span := trace.SpanFromContext(ctx); span.IsRecording() {
		span.AddEvent(event, trace.WithAttributes(kvs...))
		if links != nil {
			span.AddLink(links[0])
		}
	}
	if !t.rejectedSpans || t.dryRun {
		return
	}
	m := c.rpc
	_, span := t.tracer.Start(ctx, m.name,
		trace.WithSpanKind(trace.SpanKindClient),
		trace.WithTimestamp(c.start.Wall()),
		trace.WithLinks(links...),
		trace.WithAttributes(m.span...),
		trace.WithAttributes(semconv.RPCResponseStatusCodeKey.String(statusUnavailable)),
		trace.WithAttributes(kvs...))
	span.SetStatus(otelcodes.Error, e.Error())
	span.End()
}

// coordinatorFailure adds an event to the caller's span for a call decided
// without the coordinator.
func coordinatorFailure(ctx context.Context, scope string, v coordinator.Verdict, by decider, p FailurePolicy, cause error) {
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return
	}
	kvs := []attribute.KeyValue{
		attrScope.String(scope),
		attrVerdict.String(v.String()),
		attrSource.String(by.String()),
		attrPolicy.String(p.String()),
	}
	if cause != nil {
		kvs = append(kvs, semconv.ErrorTypeKey.String(errorKind(cause)))
	}
	span.AddEvent(eventCoordinatorFailure, trace.WithAttributes(kvs...))
}
