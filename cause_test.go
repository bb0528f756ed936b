package cbgrpc

import (
	"context"
	"errors"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/codes"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/status"

	"github.com/cbgrpc/cbgrpc/coordinator/coordinatortest"
)

// A rejection leads to its cause across replicas: Breaker A's failing
// call trips the breaker, and Breaker B, another replica with a tracer of
// its own, rejects its call with a link, on the caller's span and on the
// rejected-call span, to the span A recorded the trip in. B learns the
// cause from the coordinator, as an answer or on the feed: the trip span
// exists only once A has the answer that made the trip, so B may reject
// a call or two before it hears the cause; it is polled for.
func TestRejectionLinksToTheTripOfAnotherReplica(t *testing.T) {
	for _, kind := range everyCoordinator[:2] {
		t.Run(kind.name, func(t *testing.T) {
			c := kind.make(t, coordinatortest.NewClock())
			svc := &service{}
			addr := serveTest(t, svc)
			trA, trB := newTracing(), newTracing()
			a := newBreaker(t, c, WithPolicy(tripPolicy()), WithTracerProvider(trA.tp), WithRecordInterval(time.Millisecond))
			b := newBreaker(t, c, WithPolicy(tripPolicy()), WithTracerProvider(trB.tp))
			clientA := testgrpc.NewTestServiceClient(dial(t, addr, a))
			clientB := testgrpc.NewTestServiceClient(dial(t, addr, b))

			svc.setErr(status.Error(codes.Unavailable, "down"))
			ctx, span := trA.tp.Tracer("test").Start(context.Background(), "failing")
			clientA.EmptyCall(ctx, &testpb.Empty{})
			span.End()
			eventually(t, "A's trip span", func() bool { return len(trA.transitions(closed, open)) == 1 })
			trip := trA.transitions(closed, open)[0].SpanContext()

			var linked sdktrace.ReadOnlySpan
			eventually(t, "a rejection of B linked to A's trip", func() bool {
				ctx, span := trB.tp.Tracer("test").Start(context.Background(), "caller")
				_, err := clientB.EmptyCall(ctx, &testpb.Empty{})
				span.End()
				if !errors.Is(err, ErrOpen) {
					t.Fatalf("B's call after A's trip: %v; want it rejected", err)
				}
				for _, s := range trB.spans(testMethod[1:]) {
					if len(s.Links()) > 0 {
						linked = s
						return true
					}
				}
				return false
			})
			if l := linked.Links(); len(l) != 1 || !sameSpan(l[0].SpanContext, trip) {
				t.Errorf("B's rejected-call span links to %+v; want A's trip span %v/%v", l, trip.TraceID(), trip.SpanID())
			}
			for _, s := range trB.spans("caller") {
				if s.SpanContext().SpanID() != linked.Parent().SpanID() {
					continue
				}
				if l := s.Links(); len(l) != 1 || !sameSpan(l[0].SpanContext, trip) {
					t.Errorf("B's caller span, whose call was rejected, links to %+v; want A's trip span", l)
				}
			}
		})
	}
}

func sameSpan(a, b trace.SpanContext) bool {
	return a.TraceID() == b.TraceID() && a.SpanID() == b.SpanID()
}
