package cbgrpc

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/cbgrpc/cbgrpc/coordinator"
	"github.com/cbgrpc/cbgrpc/coordinator/coordinatortest"
	"github.com/cbgrpc/cbgrpc/internal/instant"
)

// transitions collects what WithOnTransition passes.
type transitions struct {
	mu   sync.Mutex
	seen []coordinator.Transition
}

func (ts *transitions) tell(t coordinator.Transition) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	ts.seen = append(ts.seen, t)
}

func (ts *transitions) find(f func(coordinator.Transition) bool) (coordinator.Transition, bool) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	for _, t := range ts.seen {
		if f(t) {
			return t, true
		}
	}
	return coordinator.Transition{}, false
}

// callOnce admits a call of scope on b and ends it with err; it returns the
// admission's error.
func callOnce(b *Breaker, scope string, err error) error {
	ctx := context.Background()
	tk, aerr := admitCall(b, ctx, &call{scope: scope, method: testMethod})
	if aerr != nil {
		return aerr
	}
	b.finish(ctx, tk, err)
	return nil
}

// TestOutlierRejectsItsOwnCalls: a replica whose every call fails while
// another's succeed is found an outlier by the coordinator and rejects its
// own calls, with an OpenError that says so, a transition of its own to
// the callback, a span with its ID and the cbgrpc.outlier gauge; the
// other replica's calls, and the fleet's breaker, stay as they were.
func TestOutlierRejectsItsOwnCalls(t *testing.T) {
	clk := coordinatortest.NewClock()
	_, tc := memoryWith(t, clk)
	p := outlierPolicy()
	const scope = "outlier/one"
	var told transitions
	tr, mt := newTracing(), newMetrics()
	// An hour between Records: only its introduction sends good's first outcome.
	good := newBreaker(t, tc, WithPolicy(p), WithReplicaID("good"), WithRecordInterval(time.Hour))
	bad := newBreaker(t, tc, WithPolicy(p), WithReplicaID("bad"), WithOnTransition(told.tell),
		WithTracerProvider(tr.tp), WithMeterProvider(mt.mp))

	if err := callOnce(good, scope, nil); err != nil {
		t.Fatal(err)
	}
	eventually(t, "good's first outcome, sent at once", func() bool { return tc.recorded.Load() == 1 })
	var oe *OpenError
	for i := 0; ; i++ {
		err := callOnce(bad, scope, errTransport)
		if errors.As(err, &oe) {
			break
		}
		if err != nil || i == 1000 {
			t.Fatalf("bad's call %d: %v; want a failing call, until it is told it is an outlier", i, err)
		}
		time.Sleep(time.Millisecond)
	}
	if !errors.Is(oe, ErrOpen) || !oe.Outlier || oe.State != coordinator.StateOpen || oe.RetryAfter <= 0 ||
		!strings.HasPrefix(oe.Reason, "this replica alone is failing (consecutive failures 3 >= 3") {
		t.Errorf("bad's rejection: %+v; want an outlier's OpenError", oe)
	}
	for range 5 {
		if err := callOnce(good, scope, nil); err != nil {
			t.Errorf("good's call while bad is an outlier: %v", err)
		}
	}
	if s := state(t, tc, scope, p); s != coordinator.StateClosed {
		t.Errorf("the fleet's breaker: %v; want closed", s)
	}
	eventually(t, "bad's transition, to its callback", func() bool {
		_, ok := told.find(func(tt coordinator.Transition) bool {
			return tt.Replica == "bad" && tt.From == coordinator.StateClosed && tt.To == coordinator.StateOpen
		})
		return ok
	})
	var spanned bool
	for _, s := range tr.transitions(coordinator.StateClosed, coordinator.StateOpen) {
		for _, kv := range s.Attributes() {
			spanned = spanned || (kv.Key == attrReplica && kv.Value.AsString() == "bad")
		}
	}
	if !spanned {
		t.Error("no transition span with cbgrpc.replica bad")
	}
	if n := mt.sum(t, "cbgrpc.decisions", attrSource.String("outlier"), attrVerdict.String("reject")); n != 1 {
		t.Errorf("%d rejections decided by outlier; want 1", n)
	}
	if got := outlierGauge(t, mt); got[scope] != 1 {
		t.Errorf("cbgrpc.outlier %v; want 1 for %q", got, scope)
	}
}

// outlierGauge reads the cbgrpc.outlier gauge by scope.
func outlierGauge(t *testing.T, m *metrics) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	for _, mt := range m.collect(t) {
		if mt.Name != "cbgrpc.outlier" {
			continue
		}
		for _, dp := range mt.Data.(metricdata.Gauge[int64]).DataPoints {
			v, _ := dp.Attributes.Value(attribute.Key("cbgrpc.scope"))
			out[v.AsString()] = dp.Value
		}
	}
	return out
}

// outlierAfterItsPeriod has a replica "bad" found an outlier of scope
// beside a healthy one, over the in-process coordinator, and returns it
// once its period has ended, by the coordinator's clock and this
// process's, with the end. before, if not nil, runs as bad's first calls
// are about to fail.
func outlierAfterItsPeriod(t *testing.T, scope string, before func(bad *Breaker)) (*Breaker, *testCoordinator, instant.Time) {
	t.Helper()
	clk := coordinatortest.NewClock()
	_, tc := memoryWith(t, clk)
	p := outlierPolicy()
	// An hour between Records: only its introduction sends good's first outcome.
	good := newBreaker(t, tc, WithPolicy(p), WithReplicaID("good"), WithRecordInterval(time.Hour))
	bad := newBreaker(t, tc, WithPolicy(p), WithReplicaID("bad"))
	if err := callOnce(good, scope, nil); err != nil {
		t.Fatal(err)
	}
	eventually(t, "good's first outcome", func() bool { return tc.recorded.Load() == 1 })
	if before != nil {
		before(bad)
	}
	for i := 0; callOnce(bad, scope, errTransport) == nil; i++ {
		if i == 1000 {
			t.Fatal("bad was never found an outlier")
		}
		time.Sleep(time.Millisecond)
	}
	clk.Advance(p.OpenFor)
	var until instant.Time
	eventually(t, "the period to end", func() bool {
		until = factOf(bad, scope).outlier.until
		return !instant.Now().Before(until)
	})
	return bad, tc, until
}

// TestOutlierProbesAloneAfterItsPeriod: once its period has ended, an
// outlier lets one call through at a time, as its probe, whose outcome
// goes at once; a success ends its spell.
func TestOutlierProbesAloneAfterItsPeriod(t *testing.T) {
	const scope = "outlier/probe"
	bad, tc, _ := outlierAfterItsPeriod(t, scope, nil)
	ctx := context.Background()
	probe, err := admitCall(bad, ctx, &call{scope: scope, method: testMethod})
	if err != nil || !probe.outlierProbe {
		t.Fatalf("the first call after the period: %+v, %v; want the probe", probe, err)
	}
	var oe *OpenError
	if _, err := admitCall(bad, ctx, &call{scope: scope, method: testMethod}); !errors.As(err, &oe) || !oe.Outlier || !strings.Contains(oe.Reason, "its probe is out") {
		t.Fatalf("a call while the probe is out: %v; want rejected, the probe being out", err)
	}
	records := tc.records.Load()
	bad.finish(ctx, probe, nil)
	eventually(t, "the probe's outcome, sent at once", func() bool { return tc.records.Load() > records })
	eventually(t, "the spell's end", func() bool { return !factOf(bad, scope).outlier.of(factOf(bad, scope)) })
	for range 3 {
		if err := callOnce(bad, scope, nil); err != nil {
			t.Errorf("bad's call after its probe succeeded: %v", err)
		}
	}
}

// TestOutlierLateSuccessIsNoProbe: a call an outlier let through before
// its spell that ends with a success after its period, in the batch of
// its probe, is not taken for the probe: the probe failed, and the spell
// goes on.
func TestOutlierLateSuccessIsNoProbe(t *testing.T) {
	const scope = "outlier/late"
	ctx := context.Background()
	var late *call
	bad, tc, until := outlierAfterItsPeriod(t, scope, func(bad *Breaker) {
		var err error
		if late, err = admitCall(bad, ctx, &call{scope: scope, method: testMethod}); err != nil {
			t.Fatal(err)
		}
	})
	probe, err := admitCall(bad, ctx, &call{scope: scope, method: testMethod})
	if err != nil || !probe.outlierProbe {
		t.Fatalf("the first call after the period: %+v, %v; want the probe", probe, err)
	}
	records := tc.records.Load()
	bad.finish(ctx, late, nil)
	bad.finish(ctx, probe, errTransport)
	eventually(t, "the probe's outcome", func() bool { return tc.records.Load() > records })
	eventually(t, "another period", func() bool {
		f := factOf(bad, scope)
		return f.outlier.of(f) && until.Before(f.outlier.until)
	})
	if f := factOf(bad, scope); f.outlier.reason != "probe failed" {
		t.Errorf("the spell goes on for %q; want the probe's failure", f.outlier.reason)
	}
}

func TestWithReplicaIDRefusesBadIDs(t *testing.T) {
	_, tc := memoryWith(t, coordinatortest.NewClock())
	for _, id := range []string{"", strings.Repeat("x", maxReplicaID+1), "\xff", "pod\n1"} {
		if b, err := New(tc, WithReplicaID(id)); err == nil || !strings.Contains(err.Error(), "WithReplicaID") {
			if b != nil {
				b.Close()
			}
			t.Errorf("WithReplicaID(%q): %v; want an error naming the option", id, err)
		}
	}
	if _, err := New(tc, WithReplicaID("pod-7f9c")); err != nil {
		t.Fatal(err)
	}
}

// TestDefaultReplicaIDIsUniquePerProcess: two processes of one host and
// PID (containers with host networking and PID namespaces of their own)
// get different default IDs, while the Breakers of one process share it.
func TestDefaultReplicaIDIsUniquePerProcess(t *testing.T) {
	a, b := replicaIDOf("node", 1), replicaIDOf("node", 1)
	if a == b || !strings.HasPrefix(a, "node:1:") || !strings.HasPrefix(b, "node:1:") {
		t.Errorf("two processes of host node, pid 1: %q and %q; want node:1: and a part of their own", a, b)
	}
	if err := checkReplicaID(a); err != nil {
		t.Errorf("the default %q: %v", a, err)
	}
	_, tc := memoryWith(t, coordinatortest.NewClock())
	one, two := newBreaker(t, tc), newBreaker(t, tc)
	if one.cfg.replica != two.cfg.replica || one.cfg.replica != defaultReplicaID() {
		t.Errorf("two Breakers of one process: %q and %q; want the process's default, %q", one.cfg.replica, two.cfg.replica, defaultReplicaID())
	}
}
