package cbgrpc

import (
	"testing"

	"go.opentelemetry.io/otel/attribute"

	"github.com/cbgrpc/cbgrpc/coordinator"
	"github.com/cbgrpc/cbgrpc/coordinator/coordinatortest"
)

// A dry run rejects nothing: a call of an open scope goes through to the
// dependency, counted as let through by the dry run and marked on the
// caller's span, with the coordinator's verdict kept as who decided, and
// reported to the coordinator, which counts it (Snapshot.WouldReject); its
// outcome is not recorded. Once the open period ends, its call is the
// scope's probe, and the probe's success closes the breaker.
func TestDryRunLetsThroughWhatItWouldRejectAndStillProbes(t *testing.T) {
	clk := coordinatortest.NewClock()
	m, tc := memoryWith(t, clk)
	tr, mt := newTracing(), newMetrics()
	p := tripPolicy()
	b := newBreaker(t, tc, WithPolicy(p), WithDryRun(), WithTracerProvider(tr.tp), WithMeterProvider(mt.mp), WithAdmissionCache(0))
	calls := newTracedCalls(t, b, tr)
	tripScope(t, m, calls.scope, p)

	before := len(tc.outcomes())
	if _, err := calls.call("would be rejected", true); err == nil {
		t.Fatal("the failing call succeeded")
	} else if _, rejected := err.(*OpenError); rejected {
		t.Fatalf("a dry run rejected a call: %v", err)
	}
	if n := calls.svc.calls.Load(); n != 1 {
		t.Errorf("%d calls reached the dependency; want the one let through", n)
	}
	if got := mt.sum(t, "cbgrpc.decisions", attrVerdict.String("allow"), attrSource.String("dry_run")); got != 1 {
		t.Errorf("decisions let through by the dry run = %d; want 1", got)
	}
	if got := mt.sum(t, "cbgrpc.decisions", attrVerdict.String("reject")); got != 0 {
		t.Errorf("reject decisions = %d; want none", got)
	}
	events := tr.events(eventDryRun)
	if len(events) != 1 {
		t.Fatalf("%d %s events; want 1", len(events), eventDryRun)
	}
	if v := attribute.NewSet(events[0].Attributes...); !v.HasValue(attrSource) || must(v.Value(attrSource)).AsString() != "coordinator" ||
		must(v.Value(attrState)).AsString() != "open" {
		t.Errorf("event attributes %v; want the coordinator's decision of an open scope", events[0].Attributes)
	}
	if n := len(tr.spans(testMethod[1:])); n != 0 {
		t.Errorf("%d rejected-call spans; a call let through has none", n)
	}

	eventually(t, "the coordinator to count the call the dry run let through", func() bool {
		s, err := m.Snapshot(t.Context(), calls.scope, p)
		return err == nil && s.WouldReject == 1
	})

	clk.Advance(p.OpenFor)
	if _, err := calls.call("probe", false); err != nil {
		t.Fatalf("the probe: %v", err)
	}
	eventually(t, "the probe's success closing the breaker", func() bool {
		s, err := m.Snapshot(t.Context(), calls.scope, p)
		return err == nil && s.State == coordinator.StateClosed
	})
	// What reached the coordinator after the trip: the report of the call
	// let through, no outcome of it, and the probe's settlement.
	var reports, others int
	for _, o := range tc.outcomes()[before:] {
		if o.WouldReject {
			reports++
		} else {
			others++
		}
	}
	if reports != 1 || others != 1 || tc.settled.Load() != 1 {
		t.Errorf("after the trip the coordinator heard %d reports of calls let through and %d outcomes (%d settled); want 1, and the probe's alone",
			reports, others, tc.settled.Load())
	}
}

// A dry run never rejects, even while the coordinator is unreachable and
// the scope was last seen open, or the failure policy is FailClosed.
func TestDryRunWithoutTheCoordinator(t *testing.T) {
	clk := coordinatortest.NewClock()
	m, tc := memoryWith(t, clk)
	p := tripPolicy()
	b := newBreaker(t, tc, WithPolicy(p), WithDryRun(), WithCoordinatorFailure(FailClosed), WithAdmissionCache(0))
	calls := newTracedCalls(t, b, nil)
	tripScope(t, m, calls.scope, p)
	if _, err := calls.call("learning it is open", false); err != nil {
		t.Fatalf("call while open: %v", err)
	}
	tc.set(modeFail)
	for _, name := range []string{"last seen open", "again"} {
		if _, err := calls.call(name, false); err != nil {
			t.Errorf("%s, the coordinator down: %v; want it let through", name, err)
		}
	}
}
