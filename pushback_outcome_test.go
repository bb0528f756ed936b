package cbgrpc

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/cbgrpc/cbgrpc/coordinator"
	"github.com/cbgrpc/cbgrpc/coordinator/coordinatortest"
	"github.com/cbgrpc/cbgrpc/coordinator/memory"
)

// A pushed-back failure is an outcome and a push, sent apart. These tests
// make the outcome land first, the order that lost the server's time: its
// Record or Settle opens the breaker by the rules, and the push must still
// set the open period.

// answerKey is the request metadata that tells answering what to answer:
// "ok", "fail" (Unavailable) or "push" (Unavailable with a 30 s pushback).
const answerKey = "x-answer"

type answering struct {
	testgrpc.UnimplementedTestServiceServer
	calls atomic.Int64
}

func (s *answering) EmptyCall(ctx context.Context, _ *testpb.Empty) (*testpb.Empty, error) {
	s.calls.Add(1)
	md, _ := metadata.FromIncomingContext(ctx)
	switch a := md.Get(answerKey); {
	case len(a) == 0 || a[0] == "ok":
		return &testpb.Empty{}, nil
	case a[0] == "push":
		grpc.SetTrailer(ctx, metadata.Pairs(pushbackTrailer, "30000"))
	}
	return nil, status.Error(codes.Unavailable, "overloaded")
}

// StreamingOutputCall answers as EmptyCall does, with no message.
func (s *answering) StreamingOutputCall(_ *testpb.StreamingOutputCallRequest, st testgrpc.TestService_StreamingOutputCallServer) error {
	_, err := s.EmptyCall(st.Context(), nil)
	return err
}

// pushbackOrder is one breaker over a memory coordinator on a test clock,
// calling an answering server. The coordinator's Push waits until a Record
// or Settle has opened the breaker; opens counts the transitions to open.
type pushbackOrder struct {
	t      *testing.T
	clock  *coordinatortest.Clock
	c      whole
	opened chan struct{} // cap 1: a Record or Settle opened the breaker
	opens  atomic.Int64
	b      *Breaker
	svc    *answering
	client testgrpc.TestServiceClient
	p      coordinator.Policy
}

func newPushbackOrder(t *testing.T) *pushbackOrder {
	clock := coordinatortest.NewClock()
	o := &pushbackOrder{t: t, clock: clock, opened: make(chan struct{}, 1)}
	o.c = newTestCoordinator(t, memory.New(memory.WithClock(clock.Now))).whole()
	o.c.answered = func(op string, res coordinator.Result) {
		if tr := res.Transition; op == "push" && tr != nil {
			o.opens.Add(1)
		} else if tr != nil && tr.To == coordinator.StateOpen && tr.Replica == "" {
			o.opens.Add(1)
			select {
			case o.opened <- struct{}{}:
			default:
			}
		}
	}
	o.c.pushing = func(ctx context.Context) error {
		select {
		case <-o.opened:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	p := coordinator.DefaultPolicy()
	p.MinCalls, p.FailureRatio, p.ConsecutiveFailures = 4, 0.5, 0
	// Short, so that the table's own copy of the open period (local
	// time) soon lets a probe through.
	p.OpenFor, p.MaxOpenFor = 10*time.Millisecond, time.Minute
	o.b = newBreaker(t, o.c, WithPolicy(p), WithServerPushback([]codes.Code{codes.Unavailable}),
		WithScope(func(context.Context, string, string) string { return "s" }))
	o.svc, o.p = &answering{}, p
	o.client = testgrpc.NewTestServiceClient(dial(t, serveTest(t, o.svc), o.b))
	return o
}

// call makes one call answered with answer and returns its error.
func (o *pushbackOrder) call(answer string) error {
	ctx := metadata.AppendToOutgoingContext(context.Background(), answerKey, answer)
	_, err := o.client.EmptyCall(ctx, &testpb.Empty{})
	return err
}

// stream makes one server-streaming call answered with answer and
// returns the error its first Recv gets: the stream's outcome is taken
// when gRPC ends the RPC, before the caller reads the trailer.
func (o *pushbackOrder) stream(answer string) error {
	ctx := metadata.AppendToOutgoingContext(context.Background(), answerKey, answer)
	st, err := o.client.StreamingOutputCall(ctx, &testpb.StreamingOutputCallRequest{})
	if err != nil {
		return err
	}
	_, err = st.Recv()
	return err
}

// pushed waits for the breaker's pushes to return, and reads the scope.
func (o *pushbackOrder) pushed() coordinator.Snapshot {
	o.t.Helper()
	eventually(o.t, "the push to return", func() bool {
		n := 0
		o.b.pushing.Range(func(any, any) bool { n++; return true })
		return n == 0
	})
	s, err := o.c.Snapshot(context.Background(), "s", o.p)
	if err != nil {
		o.t.Fatal(err)
	}
	return s
}

// TestPushbackOfTheFailureThatTipsTheWindow: two successes and a failure,
// then a failure with a 30 s pushback that trips the ratio, a unary call
// or a stream; its Record opens the breaker for OpenFor before the push
// lands. The push sets the open period to 30 s, with no second
// transition.
func TestPushbackOfTheFailureThatTipsTheWindow(t *testing.T) {
	for _, stream := range []bool{false, true} {
		t.Run(map[bool]string{false: "unary", true: "stream"}[stream], func(t *testing.T) {
			testPushbackOfTheFailureThatTipsTheWindow(t, stream)
		})
	}
}

func testPushbackOfTheFailureThatTipsTheWindow(t *testing.T, stream bool) {
	o := newPushbackOrder(t)
	for _, a := range []string{"ok", "ok", "fail"} {
		o.call(a)
	}
	eventually(t, "three calls counted", func() bool {
		s, err := o.c.Snapshot(context.Background(), "s", o.p)
		return err == nil && s.Calls == 3
	})
	err := o.call("push")
	if stream {
		err = o.stream("push")
	}
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("the pushed-back call: %v", err)
	}
	s := o.pushed()
	if want := o.clock.Now().Add(30 * time.Second); s.State != coordinator.StateOpen || !s.OpenUntil.Equal(want) {
		t.Errorf("after the failure that tipped the window: %v until %v; want open until %v, the server's 30s", s.State, s.OpenUntil, want)
	}
	if n := o.opens.Load(); n != 1 {
		t.Errorf("%d transitions to open; want 1", n)
	}
}

// TestPushbackOfAFailedProbe: a probe failing with a 30 s pushback; its
// Settle reopens the breaker for the back-off period before the push
// lands. The push sets the open period to 30 s, with no second transition.
func TestPushbackOfAFailedProbe(t *testing.T) {
	o := newPushbackOrder(t)
	for range 4 {
		o.call("fail")
	}
	eventually(t, "the breaker to trip", func() bool { return o.opens.Load() == 1 })
	<-o.opened // the trip's: no push is waiting for it
	o.clock.Advance(o.p.OpenFor)
	// The table rejects locally until its copy of the open period ends.
	reached := o.svc.calls.Load()
	eventually(t, "a probe to reach the server", func() bool {
		err := o.call("push")
		return !errors.Is(err, ErrOpen) && o.svc.calls.Load() > reached
	})
	s := o.pushed()
	if want := o.clock.Now().Add(30 * time.Second); s.State != coordinator.StateOpen || !s.OpenUntil.Equal(want) {
		t.Errorf("after the failed probe: %v until %v; want open until %v, the server's 30s, not the back-off", s.State, s.OpenUntil, want)
	}
	if n := o.opens.Load(); n != 2 {
		t.Errorf("%d transitions to open; want 2: the trip and the failed probe's", n)
	}
}
