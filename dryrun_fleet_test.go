package cbgrpc_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	testpb "google.golang.org/grpc/interop/grpc_testing"

	"github.com/cbgrpc/cbgrpc"
	"github.com/cbgrpc/cbgrpc/coordinator"
	"github.com/cbgrpc/cbgrpc/coordinator/memory"
	cbredis "github.com/cbgrpc/cbgrpc/coordinator/redis"
	"github.com/cbgrpc/cbgrpc/internal/fleettest"
	"github.com/cbgrpc/cbgrpc/internal/redistest"
)

// dryRunTolerance bounds how far a dry-run fleet's would-be rejections may
// lie from an enforcing fleet's rejections in the same run, as a share of
// the latter. The two fleets run the same failing pattern at the same
// pace, call for call, but on scopes of their own: each trips when its own
// batch of outcomes reaches the coordinator, and each open period ends at
// its own probe, so each open period of one fleet may start and end a
// record interval and a round trip or two apart from the other's, and the
// last may end one open period apart when a probe lands on the last
// failing call. With open periods of 150ms that is a few tens of calls
// per replica per period out of the hundreds each rejects.
const dryRunTolerance = 0.25

// A dry-run fleet and an enforcing fleet, four replicas each, call a
// dependency that fails for a while and then recovers, each fleet its own
// server on the same schedule. The dry-run fleet's breaker opens and
// closes in the coordinator as the enforcing fleet's does, none of its
// calls is rejected, and what it would have rejected is what the
// enforcing fleet rejected, within dryRunTolerance.
func TestDryRunFleetWouldRejectWhatAnEnforcingFleetRejects(t *testing.T) {
	for _, kind := range fleetCoordinators {
		t.Run(kind.name, func(t *testing.T) { testDryRunFleet(t, kind.make(t)) })
	}
}

// fleetCoordinators are the coordinators a fleet test runs over: the
// in-process one, and one over a redis-server of the test's own.
var fleetCoordinators = []struct {
	name string
	make func(t *testing.T) coordinator.Coordinator
}{
	{"memory", func(*testing.T) coordinator.Coordinator { return memory.New() }},
	{"redis", func(t *testing.T) coordinator.Coordinator { return cbredis.New(redistest.Start(t).Client(t)) }},
}

func testDryRunFleet(t *testing.T, c coordinator.Coordinator) {
	const replicas = 4
	p := coordinator.DefaultPolicy()
	p.Window, p.Buckets = time.Second, 10
	p.MinCalls, p.FailureRatio, p.ConsecutiveFailures = 10, 0.5, 0
	p.OpenFor, p.MaxOpenFor = 150*time.Millisecond, 0
	p.Probes, p.ProbeSuccesses, p.ProbeLease = 1, 1, time.Second

	enforcing, dry := fleettest.NewServer(t), fleettest.NewServer(t)
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	var mu sync.Mutex
	var moves []coordinator.Transition
	heard := func(tr coordinator.Transition) {
		mu.Lock()
		defer mu.Unlock()
		moves = append(moves, tr)
	}
	client := func(addr string, opts ...cbgrpc.Option) testgrpc.TestServiceClient {
		b, err := cbgrpc.New(c, append([]cbgrpc.Option{cbgrpc.WithPolicy(p), cbgrpc.WithRecordInterval(5 * time.Millisecond),
			cbgrpc.WithCoordinatorTimeout(time.Second)}, opts...)...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { b.Close() })
		cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithUnaryInterceptor(b.UnaryClientInterceptor()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cc.Close() })
		return testgrpc.NewTestServiceClient(cc)
	}

	enforcing.SetFailure("", 1)
	dry.SetFailure("", 1)
	var rejected, dryRejected atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i := range replicas {
		e := client(enforcing.Addr(), cbgrpc.WithReplicaID("enforcing-"+string(rune('a'+i))))
		d := client(dry.Addr(), cbgrpc.WithReplicaID("dry-"+string(rune('a'+i))), cbgrpc.WithDryRun(),
			cbgrpc.WithMeterProvider(mp), cbgrpc.WithOnTransition(heard))
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx := context.Background()
			for {
				select {
				case <-stop:
					return
				default:
				}
				if _, err := e.EmptyCall(ctx, &testpb.Empty{}); errors.Is(err, cbgrpc.ErrOpen) {
					rejected.Add(1)
				}
				if _, err := d.EmptyCall(ctx, &testpb.Empty{}); errors.Is(err, cbgrpc.ErrOpen) {
					dryRejected.Add(1)
				}
				// Pacing of the load, not a wait for a state.
				time.Sleep(time.Millisecond)
			}
		}()
	}
	// Failing long enough for several open periods and failed probes,
	// then healthy until the dry-run fleet's breaker closed.
	fleettest.Eventually(t, "the enforcing fleet rejecting calls", 10*time.Second, func() bool { return rejected.Load() > 0 })
	time.Sleep(time.Second)
	enforcing.SetFailure("", 0)
	dry.SetFailure("", 0)
	closedAgain := func() bool {
		mu.Lock()
		defer mu.Unlock()
		opened := false
		for _, m := range moves {
			opened = opened || m.To == coordinator.StateOpen
			if opened && m.To == coordinator.StateClosed {
				return true
			}
		}
		return false
	}
	fleettest.Eventually(t, "the dry-run fleet's breaker opening and closing again", 10*time.Second, closedAgain)
	// Both fleets' last open period over, a few more calls made.
	time.Sleep(3 * p.OpenFor)
	close(stop)
	wg.Wait()

	if n := dryRejected.Load(); n != 0 {
		t.Errorf("the dry-run fleet had %d calls rejected; want none", n)
	}
	would := wouldReject(t, reader)
	got := rejected.Load()
	t.Logf("enforcing fleet rejected %d calls; dry-run fleet would have rejected %d (tolerance %.0f%%)", got, would, 100*dryRunTolerance)
	if diff := float64(would - got); diff > dryRunTolerance*float64(got) || -diff > dryRunTolerance*float64(got) {
		t.Errorf("dry-run fleet would have rejected %d calls, the enforcing fleet rejected %d: more than %.0f%% apart",
			would, got, 100*dryRunTolerance)
	}
}

// wouldReject sums cbgrpc.decisions with cbgrpc.decided_by = dry_run.
func wouldReject(t *testing.T, reader *sdkmetric.ManualReader) int64 {
	return counted(t, reader, "cbgrpc.decisions", attribute.String("cbgrpc.decided_by", "dry_run"))
}

// counted sums the points of the counter name that reader collects which
// carry every attribute of where.
func counted(t *testing.T, reader *sdkmetric.ManualReader, name string, where ...attribute.KeyValue) int64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			sum, ok := m.Data.(metricdata.Sum[int64])
			if m.Name != name || !ok {
				continue
			}
			for _, dp := range sum.DataPoints {
				if !slices.ContainsFunc(where, func(kv attribute.KeyValue) bool { v, _ := dp.Attributes.Value(kv.Key); return v != kv.Value }) {
					n += dp.Value
				}
			}
		}
	}
	return n
}
