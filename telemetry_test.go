package cbgrpc

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
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
// one of them emits the closed -> open span, linked to the calls whose
// outcomes tripped it.
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
		for _, s := range got {
			if len(s.Links()) == 0 {
				t.Errorf("replica %d: closed -> open span has no links to the calls that caused it", i)
			}
			if s.Parent().IsValid() {
				t.Errorf("replica %d: a span from a batch of outcomes has a parent", i)
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
