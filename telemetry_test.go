package cbgrpc

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	otelcodes "go.opentelemetry.io/otel/codes"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/codes"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/status"

	"github.com/cbgrpc/cbgrpc/coordinator"
	"github.com/cbgrpc/cbgrpc/coordinator/coordinatortest"
	"github.com/cbgrpc/cbgrpc/coordinator/memory"
)

// TestOneTripOneSpanAcrossTheFleet: 8 Breakers, each with its own tracer
// provider (8 replicas), share a coordinator and fail together; exactly
// one of them emits the closed -> open span, in the trace of one of its
// failing calls.
func TestOneTripOneSpanAcrossTheFleet(t *testing.T) {
	const replicas = 8
	m := memory.New()
	p := coordinator.DefaultPolicy()
	p.MinCalls = 16
	svc := &service{}
	svc.setErr(status.Error(codes.Unavailable, "down"))
	addr := serveTest(t, svc)

	tracings := make([]*tracing, replicas)
	var wg sync.WaitGroup
	for i := range replicas {
		tracings[i] = newTracing()
		b := newBreaker(t, m, WithPolicy(p), WithTracerProvider(tracings[i].tp), WithRecordInterval(time.Millisecond))
		cc := dial(t, addr, b)
		client := testgrpc.NewTestServiceClient(cc)
		tracer := tracings[i].tp.Tracer("test")
		wg.Add(1)
		go func() {
			defer wg.Done()
			deadline := time.Now().Add(5 * time.Second)
			for time.Now().Before(deadline) {
				ctx, span := tracer.Start(context.Background(), "call")
				_, err := client.EmptyCall(ctx, &testpb.Empty{})
				span.End()
				if errors.Is(err, ErrOpen) {
					return
				}
			}
			t.Errorf("replica never saw the breaker open")
		}()
	}
	wg.Wait()

	var spans int
	for i, tr := range tracings {
		got := tr.transitions(coordinator.StateClosed, coordinator.StateOpen)
		spans += len(got)
		calls := make(map[trace.SpanID]trace.TraceID)
		for _, c := range tr.spans("call") {
			calls[c.SpanContext().SpanID()] = c.SpanContext().TraceID()
		}
		for _, s := range got {
			if id, ok := calls[s.Parent().SpanID()]; !ok || id != s.SpanContext().TraceID() {
				t.Errorf("replica %d: closed -> open span is not in the trace of one of its calls (parent %v)", i, s.Parent())
			}
			if s.InstrumentationScope().Name != "github.com/cbgrpc/cbgrpc" {
				t.Errorf("instrumentation scope %q", s.InstrumentationScope().Name)
			}
			want := map[attribute.Key]bool{attrScope: true, attrFrom: true, attrTo: true, attrGeneration: true, attrReason: true}
			for _, a := range s.Attributes() {
				delete(want, a.Key)
			}
			if len(want) > 0 {
				t.Errorf("span lacks attributes %v", want)
			}
		}
	}
	if spans != 1 {
		t.Errorf("%d closed -> open spans across %d replicas, want exactly 1", spans, replicas)
	}
}

// TestTransitionSpansAreChildrenOfTheirCalls: the open -> half-open span is
// a child of the call whose admission moved the breaker, the half-open ->
// closed span a child of the probe whose settlement closed it. A rejected
// call gets an event.
func TestTransitionSpansAreChildrenOfTheirCalls(t *testing.T) {
	clk := coordinatortest.NewClock()
	m, tc := memoryWith(t, clk)
	tr := newTracing()
	mt := newMetrics()
	p := tripPolicy()
	b := newBreaker(t, tc, WithPolicy(p), WithTracerProvider(tr.tp), WithMeterProvider(mt.mp))
	cc := dial(t, serveTest(t, &service{}), b)
	client := testgrpc.NewTestServiceClient(cc)
	scope := ScopeByMethod(context.Background(), cc.Target(), "/grpc.testing.TestService/EmptyCall")
	tracer := tr.tp.Tracer("test")

	// Trip it, then make sure the Breaker knows, with a rejected call.
	tripScope(t, m, scope, p)
	ctx, rejectedSpan := tracer.Start(context.Background(), "rejected")
	_, err := client.EmptyCall(ctx, &testpb.Empty{})
	rejectedSpan.End()
	if !errors.Is(err, ErrOpen) {
		t.Fatalf("call while open: %v", err)
	}
	if ev := tr.events(eventRejected); len(ev) != 1 {
		t.Errorf("%d rejection events, want 1", len(ev))
	}

	clk.Advance(p.OpenFor)
	ctx, probe := tracer.Start(context.Background(), "probe")
	if _, err := client.EmptyCall(ctx, &testpb.Empty{}); err != nil {
		t.Fatalf("probe: %v", err)
	}
	probe.End()
	eventually(t, "the close span", func() bool {
		return len(tr.transitions(coordinator.StateHalfOpen, coordinator.StateClosed)) == 1
	})
	half := tr.transitions(coordinator.StateOpen, coordinator.StateHalfOpen)
	if len(half) != 1 || half[0].Parent().SpanID() != probe.SpanContext().SpanID() {
		t.Errorf("open -> half-open spans %v, want one child of the probe call", half)
	}
	closed := tr.transitions(coordinator.StateHalfOpen, coordinator.StateClosed)
	if closed[0].Parent().SpanID() != probe.SpanContext().SpanID() {
		t.Errorf("half-open -> closed span is not a child of the probe")
	}
	// The notifier counts a transition as it delivers it, after its span
	// ended: wait for the count before reading it.
	eventually(t, "both transitions counted", func() bool { return mt.sum(t, "cbgrpc.transitions") >= 2 })
	if got := mt.sum(t, "cbgrpc.transitions"); got != 2 {
		t.Errorf("transitions metric = %d, want 2", got)
	}
	if got := mt.sum(t, "cbgrpc.decisions", attrVerdict.String("probe")); got != 1 {
		t.Errorf("probe decisions = %d, want 1", got)
	}
	if got := mt.sum(t, "cbgrpc.decisions", attrVerdict.String("reject")); got != 1 {
		t.Errorf("reject decisions = %d, want 1", got)
	}
}

// TestScopeOutOfMetricsByDefault: the scope shows in metric attributes only
// when asked for.
func TestScopeOutOfMetricsByDefault(t *testing.T) {
	for _, opt := range []bool{false, true} {
		mt := newMetrics()
		opts := []Option{WithMeterProvider(mt.mp)}
		if opt {
			opts = append(opts, WithScopeInMetrics())
		}
		b := newBreaker(t, memory.New(), opts...)
		cc := dial(t, serveTest(t, &service{}), b)
		testgrpc.NewTestServiceClient(cc).EmptyCall(context.Background(), &testpb.Empty{})
		scope := ScopeByMethod(context.Background(), cc.Target(), "/grpc.testing.TestService/EmptyCall")
		got := mt.sum(t, "cbgrpc.decisions", attrScope.String(scope))
		if want := map[bool]int64{false: 0, true: 1}[opt]; got != want {
			t.Errorf("WithScopeInMetrics %v: decisions with the scope attribute = %d, want %d", opt, got, want)
		}
	}
}

// tracedCalls makes calls of EmptyCall through b, each in a span of its
// own when traced, failing when told to.
type tracedCalls struct {
	svc    *service
	scope  string // of EmptyCall
	addr   string // the server's, "127.0.0.1:port"
	client testgrpc.TestServiceClient
	tracer trace.Tracer // nil: the calls have no span
}

func newTracedCalls(t *testing.T, b *Breaker, tr *tracing) *tracedCalls {
	c := &tracedCalls{svc: &service{}}
	c.addr = serveTest(t, c.svc)
	cc := dial(t, c.addr, b)
	c.client = testgrpc.NewTestServiceClient(cc)
	c.scope = ScopeByMethod(context.Background(), cc.Target(), testMethod)
	if tr != nil {
		c.tracer = tr.tp.Tracer("test")
	}
	return c
}

// call makes one call named name and returns its span's context (invalid
// when untraced) and its error.
func (c *tracedCalls) call(name string, fail bool) (trace.SpanContext, error) {
	if fail {
		c.svc.setErr(status.Error(codes.Unavailable, "down"))
	} else {
		c.svc.setErr(nil)
	}
	ctx := context.Background()
	if c.tracer != nil {
		var span trace.Span
		ctx, span = c.tracer.Start(ctx, name)
		defer span.End()
	}
	_, err := c.client.EmptyCall(ctx, &testpb.Empty{})
	return trace.SpanContextFromContext(ctx), err
}

// The trip is in the trace of the failing call whose outcome tipped the
// window: a child of its span, linked to the other calls of its batch. The
// first Record (S0 F1) is held while S2 F3 F4 S5 wait for it; the second
// counts S2 and F3, which make 2 failures in 4 calls and trip the breaker,
// and finds F4 and S5 stale. The trip is F3's child, not F4's, the batch's
// last failure. Both coordinators count what follows a trip as stale.
func TestTripIsInTheTraceOfTheCallThatTippedIt(t *testing.T) {
	for _, kind := range everyCoordinator[:2] {
		t.Run(kind.name, func(t *testing.T) { testTripIsInTheTraceOfTheCallThatTippedIt(t, kind) })
	}
}

func testTripIsInTheTraceOfTheCallThatTippedIt(t *testing.T, kind coordinatorKind) {
	tc := newTestCoordinator(t, kind.make(t, coordinatortest.NewClock()))
	var held atomic.Bool
	release := make(chan struct{})
	tc.recordHook = func() {
		if held.CompareAndSwap(false, true) {
			<-release
		}
	}
	tr := newTracing()
	b := newBreaker(t, tc, WithPolicy(ratioPolicy()), WithTracerProvider(tr.tp),
		WithRecordInterval(time.Hour), WithCoordinatorTimeout(time.Hour))
	calls := newTracedCalls(t, b, tr)

	calls.call("S0", false)
	calls.call("F1", true)
	eventually(t, "the first Record", func() bool { return tc.records.Load() == 1 })
	s2, _ := calls.call("S2", false)
	f3, _ := calls.call("F3", true)
	f4, _ := calls.call("F4", true)
	s5, _ := calls.call("S5", false)
	// Each outcome waits in order for the held Record to return; the next
	// batch then takes all of them.
	close(release)
	eventually(t, "the trip", func() bool { return len(tr.transitions(closed, open)) == 1 })

	trip := tr.transitions(closed, open)[0]
	if trip.SpanContext().TraceID() != f3.TraceID() || trip.Parent().SpanID() != f3.SpanID() {
		t.Errorf("trip span in trace %v, child of %v; want a child of F3 (%v in trace %v)",
			trip.SpanContext().TraceID(), trip.Parent().SpanID(), f3.SpanID(), f3.TraceID())
	}
	want := map[trace.SpanID]string{s2.SpanID(): "S2", f4.SpanID(): "F4", s5.SpanID(): "S5"}
	for _, l := range trip.Links() {
		if _, ok := want[l.SpanContext.SpanID()]; !ok {
			t.Errorf("trip span links to %v, not another call of its batch", l.SpanContext.SpanID())
		}
		delete(want, l.SpanContext.SpanID())
	}
	if len(want) > 0 {
		t.Errorf("trip span does not link to %v", want)
	}
}

// Calls without a span leave no trace to join: every transition is a root
// span of its own, with no links.
func TestTransitionsOfUntracedCallsAreRootSpans(t *testing.T) {
	clk := coordinatortest.NewClock()
	_, tc := memoryWith(t, clk)
	tr := newTracing()
	p := tripPolicy()
	b := newBreaker(t, tc, WithPolicy(p), WithTracerProvider(tr.tp))
	calls := newTracedCalls(t, b, nil)

	calls.call("fails", true)
	eventually(t, "the trip", func() bool { return len(tr.transitions(closed, open)) == 1 })
	clk.Advance(p.OpenFor)
	if _, err := calls.call("probe", false); err != nil {
		t.Fatalf("probe: %v", err)
	}
	eventually(t, "the recovery", func() bool { return len(tr.transitions(halfOpen, closed)) == 1 })

	for _, s := range append(tr.transitions(closed, open), append(tr.transitions(open, halfOpen), tr.transitions(halfOpen, closed)...)...) {
		if s.Parent().IsValid() || len(s.Links()) > 0 {
			t.Errorf("%s -> %s: parent %v, %d links; want a root span without links",
				must(attr(s, attrFrom)).AsString(), must(attr(s, attrTo)).AsString(), s.Parent(), len(s.Links()))
		}
	}
	if n := len(tr.rec.Ended()); n != 3 {
		t.Errorf("%d spans, want the 3 transitions", n)
	}
}

func must[T any](v T, _ bool) T { return v }

// A rejected call has a short client span of its own in the OpenTelemetry
// RPC conventions, a child of the caller's span, unless turned off; the
// event on the caller's span stays either way. An admitted call has no
// span from the breaker. The decision metric names the method.
func TestRejectedCallSpan(t *testing.T) {
	const name = "grpc.testing.TestService/EmptyCall"
	for _, on := range []bool{true, false} {
		t.Run(fmt.Sprintf("WithRejectedCallSpans(%v)", on), func(t *testing.T) {
			m := memory.New()
			tr := newTracing()
			mt := newMetrics()
			p := tripPolicy()
			// Decided by the coordinator, not by a cache that may or may not
			// have heard of the trip yet.
			opts := []Option{WithPolicy(p), WithTracerProvider(tr.tp), WithMeterProvider(mt.mp), WithAdmissionCache(0)}
			if !on {
				opts = append(opts, WithRejectedCallSpans(false))
			}
			b := newBreaker(t, m, opts...)
			calls := newTracedCalls(t, b, tr)
			if _, err := calls.call("admitted", false); err != nil {
				t.Fatal(err)
			}
			tripScope(t, m, calls.scope, p)
			_, portText, _ := net.SplitHostPort(calls.addr)
			port, _ := strconv.Atoi(portText)
			before := time.Now()
			caller, err := calls.call("rejected", false)
			if !errors.Is(err, ErrOpen) {
				t.Fatalf("call while open: %v", err)
			}
			if n := len(tr.events(eventRejected)); n != 1 {
				t.Errorf("%d rejection events on the caller's span, want 1", n)
			}
			if got := mt.sum(t, "cbgrpc.decisions", attrVerdict.String("reject"), semconv.RPCSystemNameKey.String("grpc"),
				semconv.RPCMethodKey.String("grpc.testing.TestService/EmptyCall"), semconv.ServerAddressKey.String("127.0.0.1"), semconv.ServerPortKey.Int(port)); got != 1 {
				t.Errorf("reject decisions of grpc.testing.TestService/EmptyCall = %d, want 1", got)
			}
			spans := tr.spans(name)
			if !on {
				if len(spans) != 0 {
					t.Errorf("%d rejected-call spans, want none", len(spans))
				}
				return
			}
			if len(spans) != 1 {
				t.Fatalf("%d spans named %q, want 1: the rejected call's, none for the admitted one", len(spans), name)
			}
			s := spans[0]
			if s.SpanKind() != trace.SpanKindClient || s.Parent().SpanID() != caller.SpanID() {
				t.Errorf("kind %v, parent %v; want a client span, child of the caller %v", s.SpanKind(), s.Parent().SpanID(), caller.SpanID())
			}
			if s.Status().Code != otelcodes.Error || !strings.Contains(s.Status().Description, calls.scope) {
				t.Errorf("status %+v, want an error naming the scope", s.Status())
			}
			if s.StartTime().Before(before) || s.EndTime().Before(s.StartTime()) {
				t.Errorf("span from %v to %v, want within the call, after %v", s.StartTime(), s.EndTime(), before)
			}
			for key, want := range map[attribute.Key]attribute.Value{
				semconv.RPCSystemNameKey:         attribute.StringValue("grpc"),
				semconv.RPCMethodKey:             attribute.StringValue("grpc.testing.TestService/EmptyCall"),
				semconv.RPCResponseStatusCodeKey: attribute.StringValue("UNAVAILABLE"),
				semconv.ServerAddressKey:         attribute.StringValue("127.0.0.1"),
				semconv.ServerPortKey:            attribute.IntValue(port),
				attrScope:                        attribute.StringValue(calls.scope),
				attrState:                        attribute.StringValue("open"),
				attrSource:                       attribute.StringValue("coordinator"),
				attrReason:                       attribute.StringValue("the dependency is failing"),
			} {
				if got, _ := attr(s, key); got != want {
					t.Errorf("%s = %v, want %v", key, got.Emit(), want.Emit())
				}
			}
			if ms, _ := attr(s, attrRetryAfter); ms.AsInt64() <= 0 || ms.AsInt64() > p.OpenFor.Milliseconds() {
				t.Errorf("%s = %v, want the rest of the open period", attrRetryAfter, ms.Emit())
			}
		})
	}
}
