package faults

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	"go.opentelemetry.io/otel"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/status"

	"github.com/cbgrpc/cbgrpc"
	"github.com/cbgrpc/cbgrpc/coordinator"
	"github.com/cbgrpc/cbgrpc/coordinator/memory"
	cbredis "github.com/cbgrpc/cbgrpc/coordinator/redis"
	"github.com/cbgrpc/cbgrpc/internal/cbfleet"
	"github.com/cbgrpc/cbgrpc/internal/fleettest"
	"github.com/cbgrpc/cbgrpc/internal/redistest"
)

// client dials srv through a new Breaker over c.
func client(t *testing.T, srv *fleettest.Server, c coordinator.Coordinator, opts ...cbgrpc.Option) testgrpc.TestServiceClient {
	t.Helper()
	b, err := cbgrpc.New(c, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	cc, err := grpc.NewClient(srv.Addr(),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithUnaryInterceptor(b.UnaryClientInterceptor()),
		grpc.WithStreamInterceptor(b.StreamClientInterceptor()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return testgrpc.NewTestServiceClient(cc)
}

// otelErrors collects what reaches the OpenTelemetry error handler for
// the rest of the test.
type otelErrors struct {
	mu   sync.Mutex
	errs []error
}

func (h *otelErrors) Handle(err error) {
	h.mu.Lock()
	h.errs = append(h.errs, err)
	h.mu.Unlock()
}

func (h *otelErrors) has(substr string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, err := range h.errs {
		if strings.Contains(err.Error(), substr) {
			return true
		}
	}
	return false
}

func catchOtelErrors(t *testing.T) *otelErrors {
	h := &otelErrors{}
	otel.SetErrorHandler(h)
	t.Cleanup(func() { otel.SetErrorHandler(otel.ErrorHandlerFunc(func(error) {})) })
	return h
}

// TestScopeFuncPanics: a scope function that panics fails the call with
// Internal, naming the panic, and the call is not sent: no unprotected
// call, no crash.
func TestScopeFuncPanics(t *testing.T) {
	handled := catchOtelErrors(t)
	srv := fleettest.NewServer(t)
	c := client(t, srv, memory.New(), cbgrpc.WithScope(func(context.Context, string, string) string {
		panic("no scope for you")
	}))
	_, err := c.EmptyCall(context.Background(), &testpb.Empty{})
	if status.Code(err) != codes.Internal || !strings.Contains(err.Error(), "no scope for you") {
		t.Errorf("unary call with a panicking scope function: %v, want Internal naming the panic", err)
	}
	stream, err := c.StreamingOutputCall(context.Background(), &testpb.StreamingOutputCallRequest{})
	if err == nil {
		_, err = stream.Recv()
	}
	if status.Code(err) != codes.Internal {
		t.Errorf("stream with a panicking scope function: %v, want Internal", err)
	}
	if n := srv.Counts().Total; n != 0 {
		t.Errorf("%d calls reached the server, want none", n)
	}
	if !handled.has("no scope for you") {
		t.Error("the panic never reached the OpenTelemetry error handler")
	}
}

// TestClassifierPanics: a classifier that panics leaves the call's result
// alone and DefaultClassifier decides instead, so failures still trip the
// breaker.
func TestClassifierPanics(t *testing.T) {
	handled := catchOtelErrors(t)
	srv := fleettest.NewServer(t)
	srv.SetFailure("", 1)
	p := fleetPolicy(0)
	p.FailureRatio, p.ConsecutiveFailures = 0, 2
	c := client(t, srv, memory.New(), cbgrpc.WithPolicy(p), cbgrpc.WithClassifier(func(context.Context, string, error) cbgrpc.Class {
		panic("cannot classify")
	}))
	for i := range 2 {
		_, err := c.EmptyCall(context.Background(), &testpb.Empty{})
		if status.Code(err) != codes.Unavailable || errors.Is(err, cbgrpc.ErrOpen) {
			t.Fatalf("call %d: %v, want the server's own Unavailable", i, err)
		}
	}
	// The outcomes are recorded in the background.
	var err error
	fleettest.Eventually(t, "the breaker to open", settle, func() bool {
		_, err = c.EmptyCall(context.Background(), &testpb.Empty{})
		return errors.Is(err, cbgrpc.ErrOpen)
	})
	if !handled.has("cannot classify") {
		t.Error("the panic never reached the OpenTelemetry error handler")
	}
}

// TestNilCoordinator: New says what is wrong; Unary and Stream, made for
// the dial-option one-liner, panic at once with the same message rather
// than at the first call.
func TestNilCoordinator(t *testing.T) {
	if _, err := cbgrpc.New(nil); err == nil || !strings.Contains(err.Error(), "coordinator is nil") {
		t.Errorf("New(nil) = %v, want an error saying the coordinator is nil", err)
	}
	for name, f := range map[string]func(){
		"Unary":  func() { cbgrpc.Unary(nil) },
		"Stream": func() { cbgrpc.Stream(nil) },
	} {
		func() {
			defer func() {
				if r := recover(); r == nil || !strings.Contains(r.(string), "coordinator is nil") {
					t.Errorf("%s(nil) panicked with %v, want a message saying the coordinator is nil", name, r)
				}
			}()
			f()
		}()
	}
}

// TestRedisKeyOfWrongType: a scope's state key holding a string (someone
// wrote over it) makes every coordinator call of that scope fail with
// Redis's WRONGTYPE error: Snapshot reports it, and calls decide as when
// the coordinator is down (the failure policy), never crash, and count a
// coordinator error.
func TestRedisKeyOfWrongType(t *testing.T) {
	rs := redistest.Start(t)
	rdb := rs.Client(t)
	srv := fleettest.NewServer(t)
	sc := scope(srv.Addr(), cbfleet.EmptyCall)
	key := redistest.ScopeKey(cbredis.DefaultPrefix, sc, "state")
	if err := rdb.Set(context.Background(), key, "not a hash", 0).Err(); err != nil {
		t.Fatal(err)
	}
	p := fleetPolicy(20)
	coord := cbredis.New(rdb)
	if _, err := coord.Snapshot(context.Background(), sc, p); err == nil || !strings.Contains(err.Error(), "WRONGTYPE") {
		t.Errorf("Snapshot of a scope whose key has the wrong type: %v, want WRONGTYPE", err)
	}
	for _, policy := range []cbgrpc.FailurePolicy{cbgrpc.FailOpen, cbgrpc.FailClosed} {
		c := client(t, srv, coord, cbgrpc.WithPolicy(p), cbgrpc.WithCoordinatorFailure(policy))
		_, err := c.EmptyCall(context.Background(), &testpb.Empty{})
		t.Logf("%v: %v", policy, err)
		if got, want := errors.Is(err, cbgrpc.ErrOpen), policy == cbgrpc.FailClosed; got != want || (!got && err != nil) {
			t.Errorf("%v: call over a key of the wrong type: %v, want the failure policy to decide", policy, err)
		}
	}
}
