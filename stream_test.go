package cbgrpc

import (
	"context"
	"errors"
	"io"
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
)

// countingClassifier classifies like DefaultClassifier, except that Canceled
// counts as a failure so that every end reaches the coordinator, and counts
// how often it is asked.
type countingClassifier struct{ n atomic.Int64 }

func (c *countingClassifier) classify(ctx context.Context, method string, err error) Class {
	c.n.Add(1)
	if status.Code(err) == codes.Canceled {
		return Failure
	}
	return DefaultClassifier(ctx, method, err)
}

// streamEnds are the ways a real stream ends, each with the class its
// outcome must have.
var streamEnds = []struct {
	name   string
	method string
	fail   error // the server's answer
	want   Class
	run    func(ctx context.Context, cancel context.CancelFunc, c testgrpc.TestServiceClient) error
}{
	{
		name: "server stream to io.EOF", method: "StreamingOutputCall", want: Success,
		run: func(ctx context.Context, _ context.CancelFunc, c testgrpc.TestServiceClient) error {
			s, err := c.StreamingOutputCall(ctx, &testpb.StreamingOutputCallRequest{})
			if err != nil {
				return err
			}
			for {
				if _, err := s.Recv(); err == io.EOF {
					return nil
				} else if err != nil {
					return err
				}
			}
		},
	},
	{
		name: "server stream RecvMsg error", method: "StreamingOutputCall", want: Failure,
		fail: status.Error(codes.Internal, "broken"),
		run: func(ctx context.Context, _ context.CancelFunc, c testgrpc.TestServiceClient) error {
			s, err := c.StreamingOutputCall(ctx, &testpb.StreamingOutputCallRequest{})
			if err != nil {
				return err
			}
			_, err = s.Recv()
			return err
		},
	},
	{
		name: "client stream RecvMsg success", method: "StreamingInputCall", want: Success,
		run: func(ctx context.Context, _ context.CancelFunc, c testgrpc.TestServiceClient) error {
			s, err := c.StreamingInputCall(ctx)
			if err != nil {
				return err
			}
			if err := s.Send(&testpb.StreamingInputCallRequest{}); err != nil {
				return err
			}
			_, err = s.CloseAndRecv()
			return err
		},
	},
	{
		name: "client stream RecvMsg error", method: "StreamingInputCall", want: Failure,
		fail: status.Error(codes.Unavailable, "down"),
		run: func(ctx context.Context, _ context.CancelFunc, c testgrpc.TestServiceClient) error {
			s, err := c.StreamingInputCall(ctx)
			if err != nil {
				return err
			}
			_, err = s.CloseAndRecv()
			return err
		},
	},
	{
		name: "bidi CloseSend then io.EOF", method: "FullDuplexCall", want: Success,
		run: func(ctx context.Context, _ context.CancelFunc, c testgrpc.TestServiceClient) error {
			s, err := c.FullDuplexCall(ctx)
			if err != nil {
				return err
			}
			if err := s.Send(&testpb.StreamingOutputCallRequest{}); err != nil {
				return err
			}
			if _, err := s.Recv(); err != nil {
				return err
			}
			if err := s.CloseSend(); err != nil {
				return err
			}
			_, err = s.Recv()
			if err == io.EOF {
				return nil
			}
			return err
		},
	},
	{
		name: "bidi caller's context cancelled", method: "FullDuplexCall", want: Failure, // Canceled, counted by countingClassifier
		run: func(ctx context.Context, cancel context.CancelFunc, c testgrpc.TestServiceClient) error {
			s, err := c.FullDuplexCall(ctx)
			if err != nil {
				return err
			}
			if err := s.Send(&testpb.StreamingOutputCallRequest{}); err != nil {
				return err
			}
			if _, err := s.Recv(); err != nil {
				return err
			}
			cancel()
			// Nobody reads or writes again: only gRPC's own watch of the
			// context ends the stream.
			return nil
		},
	},
}

// TestStreamEndsOnce checks that each way a stream ends takes its outcome
// exactly once, as a Record while closed and as a Settle while probing.
func TestStreamEndsOnce(t *testing.T) {
	for _, probe := range []bool{false, true} {
		for _, end := range streamEnds {
			name := end.name
			if probe {
				name = "probe/" + name
			}
			t.Run(name, func(t *testing.T) {
				clk := coordinatortest.NewClock()
				m, tc := memoryWith(t, clk)
				p := tripPolicy()
				svc := &service{}
				svc.setErr(end.fail)
				cl := &countingClassifier{}
				b := newBreaker(t, tc, WithPolicy(p), WithClassifier(cl.classify))
				cc := dial(t, serveTest(t, svc), b)
				method := "/grpc.testing.TestService/" + end.method
				scope := ScopeByMethod(context.Background(), cc.Target(), method)
				if probe {
					openScope(t, m, clk, scope, p)
				}

				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				err := end.run(ctx, cancel, testgrpc.NewTestServiceClient(cc))
				if end.fail != nil && status.Code(err) != status.Code(end.fail) {
					t.Fatalf("stream returned %v, want %v", err, end.fail)
				}
				if end.fail == nil && err != nil {
					t.Fatalf("stream returned %v", err)
				}
				// The outcome reaches the coordinator before Close: the
				// classifier runs before the outcome is queued, and one
				// queued after Close is dropped by design (a stress round
				// saw it, waiting for the classifier alone). A success waits
				// up to the record interval.
				for deadline := time.Now().Add(30 * time.Second); tc.recorded.Load()+tc.settled.Load() == 0; time.Sleep(time.Millisecond) {
					if time.Now().After(deadline) {
						t.Fatalf("the outcome (classified %d times) did not reach the coordinator within 30s", cl.n.Load())
					}
				}
				if err := b.Close(); err != nil {
					t.Fatal(err)
				}
				if got := cl.n.Load(); got != 1 {
					t.Errorf("outcome taken %d times, want 1", got)
				}
				records, settles := tc.recorded.Load(), tc.settled.Load()
				if probe && (settles != 1 || records != 0) {
					t.Errorf("probe: %d settled, %d recorded; want 1 settled", settles, records)
				}
				if !probe && (records != 1 || settles != 0) {
					t.Errorf("%d recorded, %d settled; want 1 recorded", records, settles)
				}
				if got := tc.outcomes(); len(got) == 1 && got[0].Failure != (end.want == Failure) {
					t.Errorf("outcome Failure=%v, want %v", got[0].Failure, end.want == Failure)
				}
			})
		}
	}
}

// openScope trips scope and lets its open period pass, so that the next
// admission is a probe.
func openScope(t testing.TB, m coordinator.Coordinator, clk *coordinatortest.Clock, scope string, p coordinator.Policy) {
	t.Helper()
	tripScope(t, m, scope, p)
	clk.Advance(p.OpenFor)
}

// fakeStream ends the way a test says, without gRPC: it stands for an
// interceptor further down that produces an end the RPC itself may not see.
type fakeStream struct {
	grpc.ClientStream
	headerErr, sendErr, recvErr error
}

func (s *fakeStream) Header() (metadata.MD, error) { return nil, s.headerErr }
func (s *fakeStream) SendMsg(any) error            { return s.sendErr }
func (s *fakeStream) RecvMsg(any) error            { return s.recvErr }
func (s *fakeStream) CloseSend() error             { return nil }

// TestStreamEndsWithoutGRPC drives the interceptor with a fake streamer, so
// that only the wrapper (no OnFinish) sees the end.
func TestStreamEndsWithoutGRPC(t *testing.T) {
	errBoom := status.Error(codes.Unavailable, "boom")
	cases := []struct {
		name     string
		desc     grpc.StreamDesc
		streamer func() (grpc.ClientStream, error)
		use      func(s grpc.ClientStream)
		want     int64 // outcomes taken
	}{
		{"streamer error", grpc.StreamDesc{ServerStreams: true}, func() (grpc.ClientStream, error) { return nil, errBoom }, nil, 1},
		{"Header error", grpc.StreamDesc{ServerStreams: true}, func() (grpc.ClientStream, error) { return &fakeStream{headerErr: errBoom}, nil },
			func(s grpc.ClientStream) { s.Header(); s.Header() }, 1},
		{"SendMsg error", grpc.StreamDesc{ClientStreams: true}, func() (grpc.ClientStream, error) { return &fakeStream{sendErr: errBoom}, nil },
			func(s grpc.ClientStream) { s.SendMsg(nil); s.SendMsg(nil) }, 1},
		{"SendMsg io.EOF is not the end", grpc.StreamDesc{ClientStreams: true}, func() (grpc.ClientStream, error) { return &fakeStream{sendErr: io.EOF}, nil },
			func(s grpc.ClientStream) { s.SendMsg(nil) }, 0},
		{"SendMsg io.EOF then RecvMsg error", grpc.StreamDesc{ClientStreams: true}, func() (grpc.ClientStream, error) { return &fakeStream{sendErr: io.EOF, recvErr: errBoom}, nil },
			func(s grpc.ClientStream) { s.SendMsg(nil); s.RecvMsg(nil); s.RecvMsg(nil) }, 1},
		{"RecvMsg success on a unary-response method", grpc.StreamDesc{ClientStreams: true}, func() (grpc.ClientStream, error) { return &fakeStream{}, nil },
			func(s grpc.ClientStream) { s.CloseSend(); s.RecvMsg(nil) }, 1},
		{"RecvMsg success on a server stream is not the end", grpc.StreamDesc{ServerStreams: true}, func() (grpc.ClientStream, error) { return &fakeStream{}, nil },
			func(s grpc.ClientStream) { s.RecvMsg(nil); s.RecvMsg(nil) }, 0},
		{"RecvMsg io.EOF", grpc.StreamDesc{ServerStreams: true}, func() (grpc.ClientStream, error) { return &fakeStream{recvErr: io.EOF}, nil },
			func(s grpc.ClientStream) { s.RecvMsg(nil); s.RecvMsg(nil) }, 1},
		{"CloseSend is not the end", grpc.StreamDesc{ServerStreams: true, ClientStreams: true}, func() (grpc.ClientStream, error) { return &fakeStream{}, nil },
			func(s grpc.ClientStream) { s.CloseSend() }, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, tc := memoryWith(t, coordinatortest.NewClock())
			cl := &countingClassifier{}
			b := newBreaker(t, tc, WithClassifier(cl.classify))
			var finish func(error)
			streamer := func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, opts ...grpc.CallOption) (grpc.ClientStream, error) {
				for _, o := range opts {
					if f, ok := o.(grpc.OnFinishCallOption); ok {
						finish = f.OnFinish
					}
				}
				return c.streamer()
			}
			s, err := b.StreamClientInterceptor()(context.Background(), &c.desc, nil, "/pkg.Svc/Method", streamer)
			if err == nil && c.use != nil {
				c.use(s)
			}
			if finish == nil {
				t.Fatal("the interceptor passed no OnFinish call option")
			}
			if err := b.Close(); err != nil {
				t.Fatal(err)
			}
			if got := cl.n.Load(); got != c.want {
				t.Errorf("outcome taken %d times, want %d", got, c.want)
			}
			if got := tc.recorded.Load(); got != c.want {
				t.Errorf("%d recorded, want %d", got, c.want)
			}
		})
	}
}

// TestAbandonedProbeStreamFreesItsSlotByLease: a probe stream that is never
// ended holds its slot until the lease runs out, and no longer.
func TestAbandonedProbeStreamFreesItsSlotByLease(t *testing.T) {
	clk := coordinatortest.NewClock()
	m, tc := memoryWith(t, clk)
	p := tripPolicy()
	b := newBreaker(t, tc, WithPolicy(p))
	cc := dial(t, serveTest(t, &service{}), b)
	client := testgrpc.NewTestServiceClient(cc)
	scope := ScopeByMethod(context.Background(), cc.Target(), "/grpc.testing.TestService/FullDuplexCall")
	openScope(t, m, clk, scope, p)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel() // only at the end: the stream is abandoned, not cancelled
	if _, err := client.FullDuplexCall(ctx); err != nil {
		t.Fatalf("probe stream: %v", err)
	}
	if _, err := client.FullDuplexCall(context.Background()); !errors.Is(err, ErrOpen) {
		t.Fatalf("second stream while the probe slot is held: %v, want ErrOpen", err)
	}
	clk.Advance(p.ProbeLease)
	s, err := client.FullDuplexCall(context.Background())
	if err != nil {
		t.Fatalf("stream after the lease ran out: %v, want a new probe", err)
	}
	s.CloseSend()
	if _, err := s.Recv(); err != io.EOF {
		t.Fatalf("probe: %v", err)
	}
	eventually(t, "the new probe to close the breaker", func() bool { return state(t, tc, scope, p) == coordinator.StateClosed })
}
