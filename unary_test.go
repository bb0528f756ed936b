package cbgrpc

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/status"

	"github.com/cbgrpc/cbgrpc/coordinator"
	"github.com/cbgrpc/cbgrpc/coordinator/coordinatortest"
)

var classificationTable = []struct {
	code codes.Code
	want Class
}{
	{codes.OK, Success},
	{codes.Canceled, Ignore},
	{codes.Unknown, Failure},
	{codes.InvalidArgument, Success},
	{codes.DeadlineExceeded, Failure},
	{codes.NotFound, Success},
	{codes.AlreadyExists, Success},
	{codes.PermissionDenied, Success},
	{codes.ResourceExhausted, Success},
	{codes.FailedPrecondition, Success},
	{codes.Aborted, Success},
	{codes.OutOfRange, Success},
	{codes.Unimplemented, Success},
	{codes.Internal, Failure},
	{codes.Unavailable, Failure},
	{codes.DataLoss, Failure},
	{codes.Unauthenticated, Success},
}

// TestClassificationTable sends one call per status code through a real
// server and checks the outcome that reached the coordinator.
func TestClassificationTable(t *testing.T) {
	for _, row := range classificationTable {
		t.Run(row.code.String(), func(t *testing.T) {
			_, tc := memoryWith(t, coordinatortest.NewClock())
			svc := &service{}
			if row.code != codes.OK {
				svc.setErr(status.Error(row.code, "told to"))
			}
			b := newBreaker(t, tc)
			client := testgrpc.NewTestServiceClient(dial(t, serveTest(t, svc), b))

			_, err := client.EmptyCall(context.Background(), &testpb.Empty{})
			if got := status.Code(err); got != row.code {
				t.Fatalf("call returned %v, want %v", got, row.code)
			}
			if got := DefaultClassifier(context.Background(), "", err); got != row.want {
				t.Errorf("DefaultClassifier = %v, want %v", got, row.want)
			}
			if err := b.Close(); err != nil {
				t.Fatal(err)
			}
			got := tc.outcomes()
			switch {
			case row.want == Ignore && len(got) != 0:
				t.Errorf("recorded %+v, want nothing", got)
			case row.want != Ignore && len(got) != 1:
				t.Errorf("recorded %d outcomes, want 1", len(got))
			case row.want != Ignore && got[0].Failure != (row.want == Failure):
				t.Errorf("recorded Failure=%v, want %v", got[0].Failure, row.want == Failure)
			}
		})
	}
}

func TestDefaultClassifierErrorsWithoutStatus(t *testing.T) {
	ctx := context.Background()
	for _, tt := range []struct {
		err  error
		want Class
	}{
		{errors.New("boom"), Failure}, // Unknown
		{fmt.Errorf("wrapped: %w", status.Error(codes.NotFound, "x")), Success},
		{context.Canceled, Ignore},
		{context.DeadlineExceeded, Failure},
		{fmt.Errorf("dial: %w", context.DeadlineExceeded), Failure},
	} {
		if got := DefaultClassifier(ctx, "/s/m", tt.err); got != tt.want {
			t.Errorf("DefaultClassifier(%v) = %v, want %v", tt.err, got, tt.want)
		}
	}
}

func TestFailOn(t *testing.T) {
	ctx := context.Background()
	f := FailOn(codes.NotFound, codes.Unavailable)
	for code, want := range map[codes.Code]Class{
		codes.OK:               Success,
		codes.NotFound:         Failure,
		codes.Unavailable:      Failure,
		codes.Internal:         Success,
		codes.DeadlineExceeded: Success,
		codes.Canceled:         Ignore,
	} {
		var err error
		if code != codes.OK {
			err = status.Error(code, "x")
		}
		if got := f(ctx, "/s/m", err); got != want {
			t.Errorf("FailOn(NotFound, Unavailable)(%v) = %v, want %v", code, got, want)
		}
	}
	if got := FailOn(codes.Canceled)(ctx, "", status.Error(codes.Canceled, "")); got != Failure {
		t.Errorf("FailOn(Canceled)(Canceled) = %v, want failure", got)
	}
}

// TestOwnRejectionIsNeverAnOutcome chains two Breakers: the inner one
// rejects, and the outer one must not count that as the dependency failing.
func TestOwnRejectionIsNeverAnOutcome(t *testing.T) {
	m, outer := memoryWith(t, coordinatortest.NewClock())
	inner := newTestCoordinator(t, m)
	inner.set(modeFail)
	// This classifier calls anything a failure, so only the Breaker's own
	// check keeps the rejection out.
	b1 := newBreaker(t, outer, WithClassifier(func(context.Context, string, error) Class { return Failure }))
	b2 := newBreaker(t, inner, WithCoordinatorFailure(FailClosed))
	svc := &service{}
	cc := dial(t, serveTest(t, svc), b1, grpc.WithChainUnaryInterceptor(b2.UnaryClientInterceptor()))
	_, err := testgrpc.NewTestServiceClient(cc).EmptyCall(context.Background(), &testpb.Empty{})
	if !errors.Is(err, ErrOpen) {
		t.Fatalf("call = %v, want the inner Breaker's rejection", err)
	}
	if err := b1.Close(); err != nil {
		t.Fatal(err)
	}
	if got := outer.outcomes(); len(got) != 0 {
		t.Errorf("outer Breaker recorded %+v for a rejection", got)
	}
	if svc.calls.Load() != 0 {
		t.Errorf("the rejected call reached the server")
	}
}

func TestRejectedCallNeverReachesServer(t *testing.T) {
	clk := coordinatortest.NewClock()
	_, tc := memoryWith(t, clk)
	svc := &service{}
	svc.setErr(status.Error(codes.Unavailable, "down"))
	p := tripPolicy()
	b := newBreaker(t, tc, WithPolicy(p))
	cc := dial(t, serveTest(t, svc), b)
	client := testgrpc.NewTestServiceClient(cc)
	ctx := context.Background()

	if _, err := client.EmptyCall(ctx, &testpb.Empty{}); status.Code(err) != codes.Unavailable || errors.Is(err, ErrOpen) {
		t.Fatalf("first call: %v, want the server's Unavailable", err)
	}
	scope := ScopeByMethod(ctx, cc.Target(), "/grpc.testing.TestService/EmptyCall")
	eventually(t, "the breaker to open", func() bool { return state(t, tc, scope, p) == coordinator.StateOpen })

	reached := svc.calls.Load()
	_, err := client.EmptyCall(ctx, &testpb.Empty{})
	if !errors.Is(err, ErrOpen) {
		t.Fatalf("call while open: %v, want ErrOpen", err)
	}
	if got := status.Code(err); got != codes.Unavailable {
		t.Errorf("status code of a rejection = %v, want Unavailable", got)
	}
	var oe *OpenError
	if !errors.As(err, &oe) || oe.Scope != scope || oe.RetryAfter <= 0 || oe.RetryAfter > p.OpenFor {
		t.Errorf("rejection = %#v, want scope %q and 0 < RetryAfter <= %v", oe, scope, p.OpenFor)
	}
	if msg := err.Error(); !strings.Contains(msg, scope) || !strings.Contains(msg, "retry after "+p.OpenFor.String()) {
		t.Errorf("message %q does not name the scope and the wait", msg)
	}
	if got := svc.calls.Load(); got != reached {
		t.Errorf("server saw %d calls after the rejection, want none", got-reached)
	}
}

// TestProbeSettlesAndCloses walks one scope closed -> open -> half-open ->
// closed with unary calls.
func TestProbeSettlesAndCloses(t *testing.T) {
	clk := coordinatortest.NewClock()
	_, tc := memoryWith(t, clk)
	svc := &service{}
	p := tripPolicy()
	b := newBreaker(t, tc, WithPolicy(p))
	cc := dial(t, serveTest(t, svc), b)
	client := testgrpc.NewTestServiceClient(cc)
	ctx := context.Background()
	scope := ScopeByMethod(ctx, cc.Target(), "/grpc.testing.TestService/EmptyCall")

	svc.setErr(status.Error(codes.Internal, "broken"))
	client.EmptyCall(ctx, &testpb.Empty{})
	eventually(t, "open", func() bool { return state(t, tc, scope, p) == coordinator.StateOpen })

	clk.Advance(p.OpenFor)
	svc.setErr(nil)
	if _, err := client.EmptyCall(ctx, &testpb.Empty{}); err != nil {
		t.Fatalf("probe: %v", err)
	}
	eventually(t, "closed", func() bool { return state(t, tc, scope, p) == coordinator.StateClosed })
	if got := tc.settles.Load(); got != 1 {
		t.Errorf("Settle called %d times, want 1", got)
	}
	// The coordinator closed it before its answer reached the table.
	eventually(t, "the table to learn that the scope closed", func() bool { return !notClosed(b, scope) })
}
