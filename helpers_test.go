package cbgrpc

import (
	"context"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	testpb "google.golang.org/grpc/interop/grpc_testing"

	"github.com/cbgrpc/cbgrpc/coordinator"
	"github.com/cbgrpc/cbgrpc/coordinator/coordinatortest"
	"github.com/cbgrpc/cbgrpc/coordinator/memory"
	"github.com/cbgrpc/cbgrpc/internal/instant"
)

// testMethod is the method of calls a test admits without making them.
const testMethod = "/grpc.testing.TestService/EmptyCall"

// service is a TestService whose answers the test sets: every method
// fails with err() when it is non-nil, and counts the calls that reached it.
type service struct {
	testgrpc.UnimplementedTestServiceServer
	calls atomic.Int64
	mu    sync.Mutex
	fail  error
}

func (s *service) setErr(err error) {
	s.mu.Lock()
	s.fail = err
	s.mu.Unlock()
}

func (s *service) err() error {
	s.calls.Add(1)
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.fail
}

func (s *service) EmptyCall(context.Context, *testpb.Empty) (*testpb.Empty, error) {
	if err := s.err(); err != nil {
		return nil, err
	}
	return &testpb.Empty{}, nil
}

func (s *service) UnaryCall(context.Context, *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
	if err := s.err(); err != nil {
		return nil, err
	}
	return &testpb.SimpleResponse{}, nil
}

func (s *service) StreamingOutputCall(_ *testpb.StreamingOutputCallRequest, st testgrpc.TestService_StreamingOutputCallServer) error {
	if err := s.err(); err != nil {
		return err
	}
	for range 2 {
		if err := st.Send(&testpb.StreamingOutputCallResponse{}); err != nil {
			return err
		}
	}
	return nil
}

func (s *service) StreamingInputCall(st testgrpc.TestService_StreamingInputCallServer) error {
	failErr := s.err()
	for {
		if _, err := st.Recv(); err == io.EOF {
			break
		} else if err != nil {
			return err
		}
	}
	if failErr != nil {
		return failErr
	}
	return st.SendAndClose(&testpb.StreamingInputCallResponse{})
}

// FullDuplexCall echoes one response per request until the client closes,
// so a test can hold a stream open and end it however it likes.
func (s *service) FullDuplexCall(st testgrpc.TestService_FullDuplexCallServer) error {
	if err := s.err(); err != nil {
		return err
	}
	for {
		if _, err := st.Recv(); err == io.EOF {
			return nil
		} else if err != nil {
			return err
		}
		if err := st.Send(&testpb.StreamingOutputCallResponse{}); err != nil {
			return err
		}
	}
}

// serve starts srv on a loopback port and returns its address.
func serve(t testing.TB, register func(*grpc.Server)) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer()
	register(s)
	go s.Serve(lis)
	t.Cleanup(s.Stop)
	return lis.Addr().String()
}

func serveTest(t testing.TB, svc testgrpc.TestServiceServer) string {
	return serve(t, func(s *grpc.Server) { testgrpc.RegisterTestServiceServer(s, svc) })
}

// dial connects to addr through b's interceptors.
func dial(t testing.TB, addr string, b *Breaker, opts ...grpc.DialOption) *grpc.ClientConn {
	t.Helper()
	opts = append([]grpc.DialOption{
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithUnaryInterceptor(b.UnaryClientInterceptor()),
		grpc.WithStreamInterceptor(b.StreamClientInterceptor()),
	}, opts...)
	cc, err := grpc.NewClient(addr, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return cc
}

// tripScope opens scope as another replica would: it admits a call, which
// gives birth to the scope if needed, and records its failure. It returns
// the open generation; p must trip on one failure.
func tripScope(t testing.TB, c coordinator.Coordinator, scope string, p coordinator.Policy) uint64 {
	t.Helper()
	ctx := context.Background()
	d, err := c.Admit(ctx, coordinator.AdmitRequest{Scope: scope, Policy: p, Claim: "tripper"})
	if err != nil {
		t.Fatal(err)
	}
	res, err := c.Record(ctx, coordinator.RecordRequest{Scope: scope, Policy: p, Outcomes: []coordinator.Outcome{{Generation: d.Generation, Failure: true}}})
	if err != nil || res.State != coordinator.StateOpen {
		t.Fatalf("tripping %q: %+v, %v", scope, res, err)
	}
	return res.Generation
}

// notClosed reports whether b remembers scope as not closed, so that it
// rejects the scope while the coordinator is unreachable.
func notClosed(b *Breaker, scope string) bool {
	_, ok := b.known.notClosed(scope)
	return ok
}

// eventually polls cond until it holds or 5s pass.
func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// state reads the scope's state from the coordinator.
func state(t testing.TB, c coordinator.Coordinator, scope string, p coordinator.Policy) coordinator.State {
	t.Helper()
	s, err := c.Snapshot(context.Background(), scope, p)
	if err != nil {
		t.Fatal(err)
	}
	return s.State
}

// newBreaker returns a Breaker that the test closes, checking that Close
// leaves no goroutine of this package behind.
// testCoordinatorTimeout is the coordinator timeout of newBreaker's
// Breakers, unless a test sets its own.
const testCoordinatorTimeout = 2 * time.Second

func newBreaker(t testing.TB, c coordinator.Coordinator, opts ...Option) *Breaker {
	t.Helper()
	// A coordinator timeout a loaded machine cannot outlast, unless the
	// test sets its own: at the default 50 ms, a real Redis under -race
	// and a busy CI host times out now and then, and the call is decided
	// by the failure policy where the test wants the coordinator's answer.
	opts = append([]Option{WithCoordinatorTimeout(testCoordinatorTimeout)}, opts...)
	b, err := New(c, opts...)
	if err != nil {
		t.Fatal(err)
	}
	leakChecked.Lock()
	if !leakChecked.m[t] {
		leakChecked.m[t] = true
		// Goroutines of Breakers from before this test (an example's
		// Unary shortcut is never closed) are not this test's.
		before := ourGoroutines()
		// Cleanups run last-in first-out: this one runs after every
		// Breaker of the test is closed.
		t.Cleanup(func() {
			checkNoGoroutines(t, before)
			leakChecked.Lock()
			delete(leakChecked.m, t)
			leakChecked.Unlock()
		})
	}
	leakChecked.Unlock()
	t.Cleanup(func() {
		if err := b.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return b
}

// memoryWith returns a memory coordinator on clk, wrapped for counting.
func memoryWith(t testing.TB, clk *coordinatortest.Clock) (*memory.Coordinator, *testCoordinator) {
	m := memory.New(memory.WithClock(clk.Now))
	return m, newTestCoordinator(t, m)
}

// factOf is what b's table knows of scope now.
func factOf(b *Breaker, scope string) *fact {
	f, _ := b.known.use(scope, instant.Now())
	return f
}

// admitCall admits c and returns it, as the tests read it.
func admitCall(b *Breaker, ctx context.Context, c *call) (*call, error) {
	return c, b.admit(ctx, routed(b, c))
}

// routed gives c, a call a test made, what its route would give it beside
// its scope: its attributes in telemetry.
func routed(b *Breaker, c *call) *call {
	if c.rpc == nil {
		var r call
		b.route(context.Background(), &r, nil, c.method, nil)
		c.rpc = r.rpc
	}
	return c
}
