package fleettest

import (
	"context"
	"io"
	"net"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/cbgrpc/cbgrpc/internal/cbfleet"
)

// Server is the dependency of a fleet: EmptyCall and UnaryCall of
// grpc.testing.TestService on a loopback port, failing with Unavailable at
// a rate the test sets, per method.
type Server struct {
	testgrpc.UnimplementedTestServiceServer
	addr string

	mu       sync.Mutex
	rate     map[string]float64 // method -> failure rate; "" for every method
	debt     map[string]float64 // failures owed, so a rate of 0.5 fails every other call
	delay    time.Duration
	held     chan struct{} // non-nil while calls are held
	inFlight int
	maxIn    int
	log      []Call
	epoch    int // counts Resets, so a call ending after one leaves the new log alone
}

// Call is one call that reached the server.
type Call struct {
	At      time.Time
	End     time.Time // zero while in flight
	Replica int       // the caller's cbfleet ID, -1 if it sent none
	Method  string
	Failed  bool
}

// NewServer starts a Server that never fails, stopped by t.Cleanup.
func NewServer(t testing.TB) *Server {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &Server{addr: lis.Addr().String(), rate: map[string]float64{}, debt: map[string]float64{}}
	g := grpc.NewServer()
	testgrpc.RegisterTestServiceServer(g, s)
	go g.Serve(lis)
	t.Cleanup(func() {
		s.Release()
		g.Stop()
	})
	return s
}

// Addr is the address replicas dial.
func (s *Server) Addr() string { return s.addr }

// SetFailure makes rate (0 to 1) of the calls of method fail; method ""
// sets every method without a rate of its own.
func (s *Server) SetFailure(method string, rate float64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rate[method] = rate
	s.debt[method] = 0
}

// SetDelay makes every call take at least d.
func (s *Server) SetDelay(d time.Duration) {
	s.mu.Lock()
	s.delay = d
	s.mu.Unlock()
}

// Hold makes calls wait, in flight, until Release.
func (s *Server) Hold() {
	s.mu.Lock()
	if s.held == nil {
		s.held = make(chan struct{})
	}
	s.mu.Unlock()
}

// Release lets held calls go on; the calls that follow are not held.
func (s *Server) Release() {
	s.mu.Lock()
	if s.held != nil {
		close(s.held)
		s.held = nil
	}
	s.mu.Unlock()
}

// Reset forgets the calls seen so far and the in-flight maximum, so that a
// test can count one phase.
func (s *Server) Reset() {
	s.mu.Lock()
	s.log = nil
	s.epoch++
	s.maxIn = s.inFlight
	s.mu.Unlock()
}

// Calls returns the calls since the last Reset.
func (s *Server) Calls() []Call {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Call, len(s.log))
	copy(out, s.log)
	return out
}

// Counts sums up the calls since the last Reset.
func (s *Server) Counts() Counts {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := Counts{InFlight: s.inFlight, MaxInFlight: s.maxIn}
	for _, call := range s.log {
		c.Total++
		if call.Failed {
			c.Failed++
		}
	}
	return c
}

// Counts is what reached the server.
type Counts struct {
	Total, Failed int
	InFlight      int
	MaxInFlight   int // most calls in flight at once since the last Reset
}

func (s *Server) EmptyCall(ctx context.Context, _ *testpb.Empty) (*testpb.Empty, error) {
	if err := s.serve(ctx, cbfleet.EmptyCall); err != nil {
		return nil, err
	}
	return &testpb.Empty{}, nil
}

func (s *Server) UnaryCall(ctx context.Context, _ *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
	if err := s.serve(ctx, cbfleet.UnaryCall); err != nil {
		return nil, err
	}
	return &testpb.SimpleResponse{}, nil
}

// StreamingOutputCall sends one message per response parameter, each its
// interval after the one before, after what serve does to a call
// (failing, delayed or held): a held stream sends nothing, not even its
// header, until Release.
func (s *Server) StreamingOutputCall(req *testpb.StreamingOutputCallRequest, stream testgrpc.TestService_StreamingOutputCallServer) error {
	if err := s.serve(stream.Context(), streamingOutputCall); err != nil {
		return err
	}
	for _, p := range req.GetResponseParameters() {
		select {
		case <-time.After(time.Duration(p.GetIntervalUs()) * time.Microsecond):
		case <-stream.Context().Done():
			return status.FromContextError(stream.Context().Err()).Err()
		}
		if err := stream.Send(&testpb.StreamingOutputCallResponse{}); err != nil {
			return err
		}
	}
	return nil
}

// StreamingInputCall reads the caller's messages until it closes its
// side, and answers then: the server sends nothing while the caller
// sends.
func (s *Server) StreamingInputCall(stream testgrpc.TestService_StreamingInputCallServer) error {
	for {
		if _, err := stream.Recv(); err == io.EOF {
			return stream.SendAndClose(&testpb.StreamingInputCallResponse{})
		} else if err != nil {
			return err
		}
	}
}

// streamingOutputCall is the name the log gives calls of StreamingOutputCall.
const streamingOutputCall = "StreamingOutputCall"

func (s *Server) serve(ctx context.Context, method string) error {
	s.mu.Lock()
	rate, ok := s.rate[method]
	key := method
	if !ok {
		rate, key = s.rate[""], ""
	}
	s.debt[key] += rate
	failed := s.debt[key] >= 1
	if failed {
		s.debt[key]--
	}
	i, epoch := len(s.log), s.epoch
	s.log = append(s.log, Call{At: time.Now(), Replica: replica(ctx), Method: method, Failed: failed})
	s.inFlight++
	s.maxIn = max(s.maxIn, s.inFlight)
	delay, held := s.delay, s.held
	s.mu.Unlock()

	defer func() {
		s.mu.Lock()
		s.inFlight--
		if s.epoch == epoch {
			s.log[i].End = time.Now()
		}
		s.mu.Unlock()
	}()
	if held != nil {
		select {
		case <-held:
		case <-ctx.Done():
			return status.FromContextError(ctx.Err()).Err()
		}
	}
	if delay > 0 {
		select {
		case <-time.After(delay):
		case <-ctx.Done():
			return status.FromContextError(ctx.Err()).Err()
		}
	}
	if failed {
		return status.Error(codes.Unavailable, "fleettest: failing as told")
	}
	return nil
}

func replica(ctx context.Context) int {
	md, _ := metadata.FromIncomingContext(ctx)
	if v := md.Get(cbfleet.IDKey); len(v) > 0 {
		if n, err := strconv.Atoi(v[0]); err == nil {
			return n
		}
	}
	return -1
}

// MaxConcurrent returns the most of calls that were in flight at the same
// time; a call without an End is in flight still.
func MaxConcurrent(calls []Call) int {
	type edge struct {
		at    time.Time
		delta int
	}
	var edges []edge
	for _, c := range calls {
		edges = append(edges, edge{c.At, 1})
		if !c.End.IsZero() {
			edges = append(edges, edge{c.End, -1})
		}
	}
	// Ends before starts at the same instant: touching calls do not overlap.
	slices.SortFunc(edges, func(a, b edge) int {
		if c := a.at.Compare(b.at); c != 0 {
			return c
		}
		return a.delta - b.delta
	})
	n, most := 0, 0
	for _, e := range edges {
		n += e.delta
		most = max(most, n)
	}
	return most
}
