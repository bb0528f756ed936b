package cbgrpc

import (
	"context"
	"maps"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	otelcodes "go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/codes"

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
	attrReplica    = attribute.Key("cbgrpc.replica")
	attrOutlier    = attribute.Key("cbgrpc.outlier")
)

// Attribute keys of the OpenTelemetry semantic conventions for RPC, as
// otelgrpc sets them, so that a rejected call reads like the calls it
// traces.
const (
	attrRPCSystem     = attribute.Key("rpc.system")
	attrRPCService    = attribute.Key("rpc.service")
	attrRPCMethod     = attribute.Key("rpc.method")
	attrRPCStatusCode = attribute.Key("rpc.grpc.status_code")
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
	rejectedSpans  bool
	// dryRun: a rejection is a call let through (dryrun.go), counted as
	// allowed by the dry run and marked with its own event.
	dryRun bool

	decisions   metric.Int64Counter
	transitions metric.Int64Counter
	dropped     metric.Int64Counter
	latency     metric.Float64Histogram
	errors      metric.Int64Counter
	feedLosses  metric.Int64Counter
	// states is observed from the table at each collection, until
	// observing is unregistered.
	states    metric.Int64ObservableGauge
	outliers  metric.Int64ObservableGauge
	observing metric.Registration

	// methods holds the options of decisions without the scope, made once
	// per method: the cached admission path must not allocate per call.
	// plainOps does the same for the latency of each coordinator
	// operation, on the path of every admission that asks.
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
	m := c.mp.Meter(instrumentationName)
	var err error
	if t.decisions, err = m.Int64Counter("cbgrpc.decisions",
		metric.WithDescription("Admissions of protected calls, by verdict, by who decided, and by gRPC method."),
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
	if t.states, err = m.Int64ObservableGauge("cbgrpc.state",
		metric.WithDescription("State of each breaker this process used in the last window, as it knows it: 0 closed, 1 open, 2 half-open, 3 isolated, 4 disabled."),
		metric.WithUnit("{state}")); err != nil {
		return nil, err
	}
	if t.outliers, err = m.Int64ObservableGauge("cbgrpc.outlier",
		metric.WithDescription("1 for each breaker of which the coordinator found this replica an outlier: failing alone, it rejects its own calls while the fleet's breaker is closed."),
		metric.WithUnit("{breaker}")); err != nil {
		return nil, err
	}
	if t.observing, err = m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		k.states(time.Now(), func(scope string, s coordinator.State) {
			o.ObserveInt64(t.states, int64(s), metric.WithAttributes(attrScope.String(scope)))
		})
		k.outliers(func(scope string) {
			o.ObserveInt64(t.outliers, 1, metric.WithAttributes(attrScope.String(scope)))
		})
		return nil
	}, t.states, t.outliers); err != nil {
		return nil, err
	}
	t.plainOps = make(map[string][]metric.RecordOption)
	for _, op := range operations {
		t.plainOps[op] = []metric.RecordOption{metric.WithAttributes(attrOperation.String(op))}
	}
	t.plainDrops = make(map[string][]metric.AddOption)
	for _, reason := range dropReasons {
		t.plainDrops[reason] = []metric.AddOption{metric.WithAttributes(attrReason.String(reason))}
	}
	t.methods.init()
	return t, nil
}

// operations are the values of cbgrpc.operation: every coordinator call
// the Breaker makes (trip.op), its metric options made once.
// TestEveryOperationIsListed holds the code to this list.
var operations = []string{"admit", "record", "settle", "push", "isolate", "release", "disable", "enable", "snapshot", "list", "keep_cause"}

// stop ends what telemetry does on its own: observing the table.
func (t *telemetry) stop() error { return t.observing.Unregister() }

// attrs returns kvs, plus the scope when the user asked for it.
func (t *telemetry) attrs(scope string, kvs ...attribute.KeyValue) metric.MeasurementOption {
	if t.scopeInMetrics {
		kvs = append(kvs, attrScope.String(scope))
	}
	return metric.WithAttributes(kvs...)
}

// decision counts one admission of a call of method ("/pkg.Service/Method").
// A dry run's rejection counts as a call its dry run let through.
func (t *telemetry) decision(ctx context.Context, scope, method string, v coordinator.Verdict, by decider) {
	if t.dryRun && v == coordinator.Reject {
		v, by = coordinator.Allow, byDryRun
	}
	m := t.methods.get(method)
	if !t.scopeInMetrics && v >= 0 && int(v) < len(m.decisions) {
		t.decisions.Add(ctx, 1, m.decisions[v][by]...)
		return
	}
	kvs := append([]attribute.KeyValue{attrVerdict.String(v.String()), attrSource.String(by.String())}, m.attrs...)
	t.decisions.Add(ctx, 1, t.attrs(scope, kvs...))
}

func (t *telemetry) feedLost(ctx context.Context, err error) {
	t.feedLosses.Add(ctx, 1, metric.WithAttributes(attrError.String(errorKind(err))))
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
		t.errors.Add(ctx, 1, t.attrs(scope, attrOperation.String(op), attrError.String(errorKind(err))))
	}
}

// transition emits the span of one transition this process caused: a child
// of parent's span (a root span when it has none), linked to links.
// A transition of this replica alone (an outlier's) says so: the metric
// with cbgrpc.outlier, the span with the replica's ID as well. It returns
// the span's context when the span records, the cause of the state the
// transition moved to (cause.go); else the zero one.
func (t *telemetry) transition(parent context.Context, tr *coordinator.Transition, links []trace.Link) trace.SpanContext {
	t.transitions.Add(parent, 1, t.attrs(tr.Scope, attrFrom.String(tr.From.String()), attrTo.String(tr.To.String()),
		attrOutlier.Bool(tr.Replica != "")))
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

// rejected shows a rejected call of method, which began at start, where a
// tracing user looks: an event on the caller's span when it records, and
// a short client span of the call's own, in the OpenTelemetry RPC
// conventions. The breaker runs above otelgrpc's stats handler, which never
// sees a call that is not sent: without this span a rejection would be
// missing from the traces that show every other call. Both link to cause,
// when valid: the span that recorded the transition behind the rejection,
// in whichever replica's trace (cause.go).
func (t *telemetry) rejected(ctx context.Context, method string, start time.Time, e *OpenError, by decider, cause trace.SpanContext) {
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
	name, rpc := rpcAttrs(method)
	_, span := t.tracer.Start(ctx, name,
		trace.WithSpanKind(trace.SpanKindClient),
		trace.WithTimestamp(wall(start)),
		trace.WithLinks(links...),
		trace.WithAttributes(rpc...),
		trace.WithAttributes(attrRPCStatusCode.Int64(int64(codes.Unavailable))),
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
		kvs = append(kvs, attrError.String(cause.Error()))
	}
	span.AddEvent(eventCoordinatorFailure, trace.WithAttributes(kvs...))
}

// maxMethods bounds the methods the decision metric names. A process calls
// the methods of the services it was built against, but one that makes
// method names at run time (a proxy, a reflective client) must not grow
// the number of time series without end: past the bound, methods read
// "_OTHER", as the semantic conventions name values they do not know.
const maxMethods = 1000

// rpcMethods holds what the decision metric says of each method, made on
// its first call.
type rpcMethods struct {
	// known is copied on write: every call reads it, without a lock, and
	// a process meets a new method rarely.
	known atomic.Pointer[map[string]*rpcMethod]
	mu    sync.Mutex // serialises writers
	other *rpcMethod
}

// rpcMethod is the attributes of one method and the options of its
// decisions, by verdict and by decider.
type rpcMethod struct {
	attrs     []attribute.KeyValue
	decisions [coordinator.Reject + 1][deciders][]metric.AddOption
}

func (ms *rpcMethods) init() {
	ms.known.Store(&map[string]*rpcMethod{})
	ms.other = newRPCMethod([]attribute.KeyValue{attrRPCSystem.String("grpc"),
		attrRPCService.String("_OTHER"), attrRPCMethod.String("_OTHER")})
}

func (ms *rpcMethods) get(full string) *rpcMethod {
	if m := (*ms.known.Load())[full]; m != nil {
		return m
	}
	ms.mu.Lock()
	defer ms.mu.Unlock()
	old := *ms.known.Load()
	if m := old[full]; m != nil {
		return m
	}
	if len(old) >= maxMethods {
		return ms.other
	}
	_, kvs := rpcAttrs(full)
	m := newRPCMethod(kvs)
	known := make(map[string]*rpcMethod, len(old)+1)
	maps.Copy(known, old)
	known[full] = m
	ms.known.Store(&known)
	return m
}

func newRPCMethod(kvs []attribute.KeyValue) *rpcMethod {
	m := &rpcMethod{attrs: kvs}
	for v := range m.decisions {
		for by := range m.decisions[v] {
			all := append([]attribute.KeyValue{attrVerdict.String(coordinator.Verdict(v).String()), attrSource.String(decider(by).String())}, kvs...)
			m.decisions[v][by] = []metric.AddOption{metric.WithAttributes(all...)}
		}
	}
	return m
}

// rpcAttrs returns the span name ("pkg.Service/Method") and the RPC
// attributes of a full method ("/pkg.Service/Method"), read as otelgrpc
// reads them.
func rpcAttrs(full string) (name string, kvs []attribute.KeyValue) {
	kvs = []attribute.KeyValue{attrRPCSystem.String("grpc")}
	if !strings.HasPrefix(full, "/") {
		return full, kvs
	}
	name = full[1:]
	i := strings.LastIndexByte(name, '/')
	if i < 0 {
		return name, kvs
	}
	if service := name[:i]; service != "" {
		kvs = append(kvs, attrRPCService.String(service))
	}
	if method := name[i+1:]; method != "" {
		kvs = append(kvs, attrRPCMethod.String(method))
	}
	return name, kvs
}
