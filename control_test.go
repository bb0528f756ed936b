package cbgrpc

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/cbgrpc/cbgrpc/coordinator"
	"github.com/cbgrpc/cbgrpc/coordinator/coordinatortest"
	"github.com/cbgrpc/cbgrpc/coordinator/memory"
)

// An operator's change made through a Breaker is a transition like any
// other: a span from this process, and the scope's calls obey it at once.
func TestBreakerIsolateAndRelease(t *testing.T) {
	tr := newTracing()
	mt := newMetrics()
	b := newBreaker(t, memory.New(), WithPolicy(tripPolicy()), WithTracerProvider(tr.tp), WithMeterProvider(mt.mp))
	ctx := context.Background()
	const scope = "operator"

	res, err := b.Isolate(ctx, scope, coordinator.Note{By: "alice", Reason: "INC-1"})
	if err != nil || res.State != coordinator.StateIsolated {
		t.Fatalf("Isolate: %+v, %v; want isolated", res, err)
	}
	spans := tr.transitions(coordinator.StateClosed, coordinator.StateIsolated)
	if len(spans) != 1 {
		t.Fatalf("%d closed->isolated spans, want 1", len(spans))
	}
	var reason string
	for _, a := range spans[0].Attributes() {
		if a.Key == attrReason {
			reason = a.Value.AsString()
		}
	}
	if !strings.Contains(reason, "alice") || !strings.Contains(reason, "INC-1") {
		t.Errorf("span reason %q does not carry the operator's note", reason)
	}
	_, err = b.admit(ctx, scope, testMethod)
	var oe *OpenError
	if !errors.As(err, &oe) || oe.State != coordinator.StateIsolated {
		t.Fatalf("admission of an isolated scope: %v, want a rejection naming the isolation", err)
	}

	if _, err := b.Release(ctx, scope, coordinator.Note{By: "alice"}); err != nil {
		t.Fatal(err)
	}
	if len(tr.transitions(coordinator.StateIsolated, coordinator.StateClosed)) != 1 {
		t.Error("no isolated->closed span")
	}
	if _, err := b.admit(ctx, scope, testMethod); err != nil {
		t.Errorf("admission after Release: %v", err)
	}
	if got := mt.sum(t, "cbgrpc.transitions"); got != 2 {
		t.Errorf("cbgrpc.transitions = %d, want 2", got)
	}
}

func TestBreakerControlNeedsAController(t *testing.T) {
	_, tc := memoryWith(t, coordinatortest.NewClock()) // the wrapper hides memory's Controller
	b := newBreaker(t, tc)
	if _, err := b.Isolate(context.Background(), "s", coordinator.Note{Reason: "x"}); !errors.Is(err, ErrNoController) {
		t.Fatalf("Isolate over a coordinator without control: %v, want ErrNoController", err)
	}
}
