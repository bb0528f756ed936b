package cbgrpc_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/status"

	"github.com/cbgrpc/cbgrpc"
	"github.com/cbgrpc/cbgrpc/coordinator"
	"github.com/cbgrpc/cbgrpc/coordinator/memory"
	"github.com/cbgrpc/cbgrpc/internal/fleettest"
)

// stallFleet is a fleet of replicas, each its own Breaker and replica ID,
// calling one fleettest.Server without waiting for each other's calls.
type stallFleet struct {
	t      *testing.T
	server *fleettest.Server
	stream bool

	mu    sync.Mutex
	moves []coordinator.Transition

	clients []testgrpc.TestServiceClient
	reader  *sdkmetric.ManualReader
	spans   *tracetest.SpanRecorder
	calls   sync.WaitGroup
	// rejected and ended count the calls the breaker rejected and those
	// that ended otherwise; failed those of the latter that failed, and
	// how (errs).
	rejected, ended, failed atomic.Int64
	errs                    sync.Map // status code -> *atomic.Int64
}

func newStallFleet(t *testing.T, c coordinator.Coordinator, replicas int, stream bool, opts ...cbgrpc.Option) *stallFleet {
	f := &stallFleet{t: t, server: fleettest.NewServer(t), stream: stream, reader: sdkmetric.NewManualReader(), spans: tracetest.NewSpanRecorder()}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(f.reader))
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(f.spans))
	for i := range replicas {
		b, err := cbgrpc.New(c, append([]cbgrpc.Option{cbgrpc.WithReplicaID(fmt.Sprintf("stall-%d", i)),
			cbgrpc.WithMeterProvider(mp), cbgrpc.WithTracerProvider(tp), cbgrpc.WithOnTransition(func(tr coordinator.Transition) {
				f.mu.Lock()
				defer f.mu.Unlock()
				f.moves = append(f.moves, tr)
			})}, opts...)...)
		if err != nil {
			t.Fatal(err)
		}
		cc, err := grpc.NewClient(f.server.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithUnaryInterceptor(b.UnaryClientInterceptor()), grpc.WithStreamInterceptor(b.StreamClientInterceptor()))
		if err != nil {
			t.Fatal(err)
		}
		// Last in, first out: the calls end before the Breakers close.
		t.Cleanup(func() { b.Close() })
		t.Cleanup(func() { cc.Close() })
		t.Cleanup(f.calls.Wait)
		f.clients = append(f.clients, testgrpc.NewTestServiceClient(cc))
	}
	return f
}

// call makes one call of replica i in its own goroutine, with a deadline
// of d.
func (f *stallFleet) call(i int, d time.Duration) {
	f.calls.Add(1)
	go func() {
		defer f.calls.Done()
		ctx, cancel := context.WithTimeout(context.Background(), d)
		defer cancel()
		var err error
		if f.stream {
			var s testgrpc.TestService_StreamingOutputCallClient
			s, err = f.clients[i].StreamingOutputCall(ctx, &testpb.StreamingOutputCallRequest{
				ResponseParameters: []*testpb.ResponseParameters{{}}})
			for err == nil {
				_, err = s.Recv()
			}
			if err == io.EOF {
				err = nil
			}
		} else {
			_, err = f.clients[i].EmptyCall(ctx, &testpb.Empty{})
		}
		switch {
		case errors.Is(err, cbgrpc.ErrOpen):
			f.rejected.Add(1)
		case err != nil:
			f.failed.Add(1)
			n, _ := f.errs.LoadOrStore(status.Code(err).String(), new(atomic.Int64))
			n.(*atomic.Int64).Add(1)
			fallthrough
		default:
			f.ended.Add(1)
		}
	}()
}

// load makes every replica call every d until stop is closed.
func (f *stallFleet) load(every, deadline time.Duration, stop <-chan struct{}) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			for i := range f.clients {
				f.call(i, deadline)
			}
		}
	}
}

// trips returns the fleet's trips heard so far (not a replica's own, an
// outlier's).
func (f *stallFleet) trips() []coordinator.Transition {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []coordinator.Transition
	for _, m := range f.moves {
		if m.To == coordinator.StateOpen && m.From == coordinator.StateClosed && m.Replica == "" {
			out = append(out, m)
		}
	}
	return out
}

// tripReason returns the cbgrpc.reason of the ended span of the trip into
// generation gen, and whether there is one.
func (f *stallFleet) tripReason(gen uint64) (string, bool) {
	for _, s := range f.spans.Ended() {
		if s.Name() != "cbgrpc.transition" {
			continue
		}
		var from, to, reason string
		var at int64
		for _, a := range s.Attributes() {
			switch a.Key {
			case "cbgrpc.state.from":
				from = a.Value.AsString()
			case "cbgrpc.state.to":
				to = a.Value.AsString()
			case "cbgrpc.reason":
				reason = a.Value.AsString()
			case "cbgrpc.generation":
				at = a.Value.AsInt64()
			}
		}
		if from == "closed" && to == "open" && uint64(at) == gen {
			return reason, true
		}
	}
	return "", false
}

// stallsCounted sums cbgrpc.stalls.
func (f *stallFleet) stallsCounted() int64 { return counted(f.t, f.reader, "cbgrpc.stalls") }

// Four replicas call a dependency that then stops answering: the calls in
// flight past the threshold trip the fleet's breaker long before their
// deadlines, the trip says so, new calls are rejected, and the calls in
// the hole are not cancelled: they end when the dependency answers again.
// Over both coordinators, unary calls and a server stream that withholds
// its first message.
func TestStalledCallsTripTheFleetWhileTheyRun(t *testing.T) {
	for _, kind := range fleetCoordinators {
		for _, stream := range []bool{false, true} {
			name := kind.name + "/unary"
			if stream {
				name = kind.name + "/stream"
			}
			t.Run(name, func(t *testing.T) { testStalledFleet(t, kind.make(t), stream) })
		}
	}
}

func testStalledFleet(t *testing.T, c coordinator.Coordinator, stream bool) {
	const replicas = 4
	// A deadline the test never waits for: the trip must come first.
	const deadline = time.Minute
	// Longer than a loaded machine's pauses, which a race-enabled test
	// run meets: under two such runs at once, healthy calls of the four
	// replicas, all in this one starved process, took over 300 ms, 20 in
	// a row, and tripped the fleet. The coordinator answers within the timeout however
	// loaded the machine, so that the replica whose Record trips the
	// breaker hears it and makes the span; and the healthy spell's
	// successes reach the window before the stall, which is then judged
	// by the run of stalls, or the recent excursion, rather than by a
	// young window's ratio, whose reason does not count stalls.
	f := newStallFleet(t, c, replicas, stream, cbgrpc.WithStallAfter(time.Second),
		cbgrpc.WithCoordinatorTimeout(2*time.Second), cbgrpc.WithRecordInterval(50*time.Millisecond))
	stop := make(chan struct{})
	var loading sync.WaitGroup
	loading.Add(1)
	go func() {
		defer loading.Done()
		f.load(10*time.Millisecond, deadline, stop)
	}()
	defer func() {
		close(stop)
		loading.Wait()
		f.server.Release()
	}()
	fleettest.Eventually(t, "a healthy spell", 20*time.Second, func() bool { return f.ended.Load() >= 400 })
	if trips := f.trips(); len(trips) > 0 {
		t.Fatalf("tripped while healthy: %+v", trips)
	}

	f.server.Hold()
	fleettest.Eventually(t, "the fleet tripping by stalls", 20*time.Second, func() bool { return len(f.trips()) > 0 })
	tr := f.trips()[0]
	if !strings.Contains(tr.Reason, "stalled") {
		t.Errorf("trip reason %q; want it to say the calls stalled", tr.Reason)
	}
	// The span ends once the answer that tripped it came back.
	fleettest.Eventually(t, "the trip's span", 10*time.Second, func() bool { _, ok := f.tripReason(tr.Generation); return ok })
	if r, _ := f.tripReason(tr.Generation); !strings.Contains(r, "stalled") {
		t.Errorf("the trip's span has cbgrpc.reason %q; want it to say the calls stalled", r)
	}
	f.errs.Range(func(code, n any) bool {
		t.Logf("%d calls failed with %s", n.(*atomic.Int64).Load(), code)
		return true
	})
	fleettest.Eventually(t, "calls rejected", 10*time.Second, func() bool { return f.rejected.Load() > 0 })
	held := f.server.Counts().InFlight
	if held == 0 {
		t.Fatal("no call in flight at the server after the trip; want the stalled calls still running")
	}
	stalls := f.stallsCounted()
	if stalls == 0 {
		t.Error("cbgrpc.stalls counted none")
	}
	t.Logf("trip %q; %d calls held at the server, %d reported stalled, %d rejected", tr.Reason, held, stalls, f.rejected.Load())

	// The calls in the hole end when the dependency answers, not before.
	endedBefore := f.ended.Load()
	f.server.Release()
	fleettest.Eventually(t, "the held calls ending", 10*time.Second, func() bool { return f.ended.Load() >= endedBefore+int64(held) })
}

// With no threshold set, each replica learns its scope's from the calls'
// latency: calls of 300ms, many times the floor, are never stalled, and
// calls held far longer are, and trip the fleet.
func TestStallThresholdIsLearned(t *testing.T) {
	f := newStallFleet(t, memory.New(), 2, false)
	f.server.SetDelay(300 * time.Millisecond)
	stop := make(chan struct{})
	var loading sync.WaitGroup
	loading.Add(1)
	go func() {
		defer loading.Done()
		f.load(2*time.Millisecond, time.Minute, stop)
	}()
	defer func() {
		close(stop)
		loading.Wait()
		f.server.Release()
	}()
	// Enough calls for each replica to sample its threshold, and more.
	fleettest.Eventually(t, "a healthy spell", 30*time.Second, func() bool { return f.ended.Load() >= 3000 })
	if n := f.stallsCounted(); n != 0 {
		t.Fatalf("%d calls of 300ms reported stalled; want none", n)
	}
	if trips := f.trips(); len(trips) > 0 {
		t.Fatalf("tripped while healthy: %+v", trips)
	}
	f.server.Hold()
	fleettest.Eventually(t, "the fleet tripping by stalls", 20*time.Second, func() bool { return len(f.trips()) > 0 })
	if tr := f.trips()[0]; !strings.Contains(tr.Reason, "stalled") {
		t.Errorf("trip reason %q; want it to say the calls stalled", tr.Reason)
	}
}

// A client stream may wait for its caller before any answer: it is never
// stalled, however long it waits.
func TestClientStreamsAreNotWatched(t *testing.T) {
	f := newStallFleet(t, memory.New(), 1, false, cbgrpc.WithStallAfter(time.Millisecond))
	// A unary call of the same scope answered first: the scope is watched.
	scope := cbgrpc.CallScope("streams")
	if _, err := f.clients[0].EmptyCall(context.Background(), &testpb.Empty{}, scope); err != nil {
		t.Fatal(err)
	}
	// The watcher's next ticks (17ms each) set the threshold.
	time.Sleep(100 * time.Millisecond)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s, err := f.clients[0].StreamingInputCall(ctx, scope)
	if err != nil {
		t.Fatal(err)
	}
	// Long enough for the watch to have reported it many times over.
	time.Sleep(200 * time.Millisecond)
	cancel()
	s.CloseAndRecv()
	if n := f.stallsCounted(); n != 0 {
		t.Errorf("%d client streams reported stalled; want none", n)
	}
}

// A server stream is stalled only while it waits for its first message: one
// that has it is not, however long the next one takes.
func TestStreamsAnsweredAreNotStalled(t *testing.T) {
	f := newStallFleet(t, memory.New(), 1, false, cbgrpc.WithStallAfter(20*time.Millisecond))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// The second message 300ms after the first: long enough for the watch
	// to have reported the stream many times over, were it watched still.
	s, err := f.clients[0].StreamingOutputCall(ctx, &testpb.StreamingOutputCallRequest{
		ResponseParameters: []*testpb.ResponseParameters{{}, {IntervalUs: 300_000}}})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for ; err == nil; n++ {
		_, err = s.Recv()
	}
	if err != io.EOF || n != 3 {
		t.Fatalf("stream ended with %v after %d receives; want io.EOF after 2 messages", err, n-1)
	}
	if got := f.stallsCounted(); got != 0 {
		t.Errorf("%d answered streams reported stalled; want none", got)
	}
	// The same stream, its first message withheld as long, is stalled.
	s, err = f.clients[0].StreamingOutputCall(ctx, &testpb.StreamingOutputCallRequest{
		ResponseParameters: []*testpb.ResponseParameters{{IntervalUs: 300_000}}})
	if err != nil {
		t.Fatal(err)
	}
	for err == nil {
		_, err = s.Recv()
	}
	if got := f.stallsCounted(); got != 1 {
		t.Errorf("%d streams reported stalled; want the one that waited 300ms for its first message", got)
	}
}

// Until a call of the scope was answered (a new connection still dialling,
// a dependency that never answered this replica), no call is watched: the
// first calls of a cold start are no evidence of a stall.
func TestNoStallBeforeTheFirstAnswer(t *testing.T) {
	f := newStallFleet(t, memory.New(), 1, false, cbgrpc.WithStallAfter(20*time.Millisecond))
	f.server.Hold()
	for range 30 {
		f.call(0, time.Minute)
	}
	fleettest.Eventually(t, "the calls held at the server", 10*time.Second, func() bool { return f.server.Counts().InFlight == 30 })
	// Many thresholds' worth of ticks.
	time.Sleep(200 * time.Millisecond)
	if n := f.stallsCounted(); n != 0 {
		t.Errorf("%d calls reported stalled before any call of the scope was answered; want none", n)
	}
	f.server.Release()
}
