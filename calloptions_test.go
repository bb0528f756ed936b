package cbgrpc

import (
	"context"
	"errors"
	"io"
	"slices"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/status"

	"github.com/cbgrpc/cbgrpc/coordinator"
	"github.com/cbgrpc/cbgrpc/coordinator/coordinatortest"
)

// callKinds are the two kinds of call a per-call option applies to, each
// made through a real server and run to its end.
var callKinds = []struct {
	name   string
	method string
	call   func(ctx context.Context, c testgrpc.TestServiceClient, opts ...grpc.CallOption) error
}{
	{"unary", "/grpc.testing.TestService/EmptyCall", func(ctx context.Context, c testgrpc.TestServiceClient, opts ...grpc.CallOption) error {
		_, err := c.EmptyCall(ctx, &testpb.Empty{}, opts...)
		return err
	}},
	{"stream", "/grpc.testing.TestService/StreamingOutputCall", func(ctx context.Context, c testgrpc.TestServiceClient, opts ...grpc.CallOption) error {
		s, err := c.StreamingOutputCall(ctx, &testpb.StreamingOutputCallRequest{}, opts...)
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
	}},
}

// onEachCoordinator runs f over memory and over a redis-server, each on
// its own fake clock.
func onEachCoordinator(t *testing.T, f func(t *testing.T, c coordinator.Coordinator)) {
	for _, kind := range everyCoordinator[:2] {
		t.Run(kind.name, func(t *testing.T) { f(t, kind.make(t, coordinatortest.NewClock())) })
	}
}

// forEachCallAndCoordinator runs f for unary and stream calls, each over
// a new memory coordinator and a new redis-server.
func forEachCallAndCoordinator(t *testing.T, f func(t *testing.T, c coordinator.Coordinator, method string, call func(context.Context, testgrpc.TestServiceClient, ...grpc.CallOption) error)) {
	for _, kind := range everyCoordinator[:2] {
		for _, ck := range callKinds {
			t.Run(kind.name+"/"+ck.name, func(t *testing.T) {
				f(t, kind.make(t, coordinatortest.NewClock()), ck.method, ck.call)
			})
		}
	}
}

// TestCallScopeDirectsTheOutcome: a failure in a scope named by CallScope
// trips that scope and no other; calls naming it are rejected, even of a
// method left out of the breaker, while the method's own scope and other
// named scopes still admit.
func TestCallScopeDirectsTheOutcome(t *testing.T) {
	forEachCallAndCoordinator(t, func(t *testing.T, c coordinator.Coordinator, method string, call func(context.Context, testgrpc.TestServiceClient, ...grpc.CallOption) error) {
		p := tripPolicy()
		svc := &service{}
		b := newBreaker(t, c, WithPolicy(p), WithExcludedMethods("/grpc.testing.TestService/UnaryCall"))
		cc := dial(t, serveTest(t, svc), b)
		client := testgrpc.NewTestServiceClient(cc)
		ctx := context.Background()
		own := ScopeByMethod(ctx, cc.Target(), method)

		svc.setErr(status.Error(codes.Unavailable, "down"))
		if err := call(ctx, client, CallScope("payments")); status.Code(err) != codes.Unavailable || errors.Is(err, ErrOpen) {
			t.Fatalf("first call: %v, want the server's Unavailable", err)
		}
		eventually(t, "payments to open", func() bool { return state(t, c, "payments", p) == open })
		if s := snapshotOf(t, c, own, p); s.State != closed || s.Calls != 0 {
			t.Errorf("the method's own scope: %+v, want closed and untouched", s)
		}

		svc.setErr(nil)
		reached := svc.calls.Load()
		err := call(ctx, client, CallScope("payments"))
		var oe *OpenError
		if !errors.As(err, &oe) || oe.Scope != "payments" {
			t.Errorf("call naming the open scope: %v, want rejected for payments", err)
		}
		if err := call(ctx, client); err != nil {
			t.Errorf("call in the method's own scope: %v, want admitted", err)
		}
		if err := call(ctx, client, CallScope("inventory")); err != nil {
			t.Errorf("call naming another scope: %v, want admitted", err)
		}
		if _, err := client.UnaryCall(ctx, &testpb.SimpleRequest{}, CallScope("payments")); !errors.Is(err, ErrOpen) {
			t.Errorf("excluded method naming the open scope: %v, want rejected", err)
		}
		if _, err := client.UnaryCall(ctx, &testpb.SimpleRequest{}); err != nil {
			t.Errorf("excluded method: %v, want it sent", err)
		}
		if n := svc.calls.Load() - reached; n != 3 {
			t.Errorf("%d calls reached the server, want 3 (none of the rejected)", n)
		}
	})
}

// TestUnprotectedNeverReachesTheCoordinator: calls with Unprotected go
// through an open breaker, whatever scope they name, and neither ask the
// coordinator nor count, as outcomes or as decisions.
func TestUnprotectedNeverReachesTheCoordinator(t *testing.T) {
	forEachCallAndCoordinator(t, func(t *testing.T, c coordinator.Coordinator, method string, call func(context.Context, testgrpc.TestServiceClient, ...grpc.CallOption) error) {
		tc := newTestCoordinator(t, c)
		p := tripPolicy()
		mt := newMetrics()
		// Without the admission cache, a protected call always asks.
		b := newBreaker(t, tc, WithPolicy(p), WithAdmissionCache(0), WithMeterProvider(mt.mp))
		svc := &service{}
		cc := dial(t, serveTest(t, svc), b)
		client := testgrpc.NewTestServiceClient(cc)
		ctx := context.Background()
		tripScope(t, c, ScopeByMethod(ctx, cc.Target(), method), p)
		if err := call(ctx, client); !errors.Is(err, ErrOpen) {
			t.Fatalf("protected call in the open scope: %v, want rejected", err)
		}
		admits, decisions := tc.admits.Load(), mt.sum(t, "cbgrpc.decisions")

		if err := call(ctx, client, Unprotected()); err != nil {
			t.Errorf("unprotected call in the open scope: %v, want it sent", err)
		}
		svc.setErr(status.Error(codes.Unavailable, "down"))
		for _, opts := range [][]grpc.CallOption{
			{CallScope("payments"), Unprotected()},
			{Unprotected(), CallScope("payments")},
			{Unprotected(), CallClassifier(FailOn(codes.Unavailable))},
		} {
			if err := call(ctx, client, opts...); status.Code(err) != codes.Unavailable || errors.Is(err, ErrOpen) {
				t.Errorf("failing unprotected call: %v, want the server's Unavailable", err)
			}
		}
		if n := svc.calls.Load(); n != 4 {
			t.Errorf("%d calls reached the server, want the 4 unprotected", n)
		}
		if n := tc.admits.Load() - admits; n != 0 {
			t.Errorf("unprotected calls made %d admissions, want none", n)
		}
		if n := mt.sum(t, "cbgrpc.decisions") - decisions; n != 0 {
			t.Errorf("unprotected calls counted %d decisions, want none", n)
		}
		if err := b.Close(); err != nil {
			t.Fatal(err)
		}
		if got := tc.outcomes(); len(got) != 0 {
			t.Errorf("outcomes recorded: %+v, want none", got)
		}
		if s := snapshotOf(t, c, "payments", p); s.Generation != 0 {
			t.Errorf("the scope named by unprotected calls was born: %+v", s)
		}
	})
}

// TestCallClassifierForOneCallOnly: a call's own classifier decides its
// outcome in place of the Breaker's, for that call only; a panic of it is
// contained, DefaultClassifier deciding.
func TestCallClassifierForOneCallOnly(t *testing.T) {
	forEachCallAndCoordinator(t, func(t *testing.T, c coordinator.Coordinator, method string, call func(context.Context, testgrpc.TestServiceClient, ...grpc.CallOption) error) {
		handled := otelErrors(t)
		tc := newTestCoordinator(t, c)
		var own countingClassifier
		b := newBreaker(t, tc, WithClassifier(own.classify))
		svc := &service{}
		svc.setErr(status.Error(codes.NotFound, "no such user"))
		client := testgrpc.NewTestServiceClient(dial(t, serveTest(t, svc), b))
		ctx := context.Background()
		panicking := func(context.Context, string, error) Class { panic("cannot classify this one") }

		for _, opts := range [][]grpc.CallOption{
			nil,
			{CallClassifier(FailOn(codes.NotFound))},
			nil,
			{CallClassifier(panicking)},
		} {
			if err := call(ctx, client, opts...); status.Code(err) != codes.NotFound {
				t.Fatalf("call: %v, want the server's NotFound", err)
			}
		}
		if err := b.Close(); err != nil {
			t.Fatal(err)
		}
		var got []bool
		for _, o := range tc.outcomes() {
			got = append(got, o.Failure)
		}
		if want := []bool{false, true, false, false}; !slices.Equal(got, want) {
			t.Errorf("outcomes Failure = %v, want %v", got, want)
		}
		if n := own.n.Load(); n != 2 {
			t.Errorf("the Breaker's classifier was asked %d times, want 2 (the calls without their own)", n)
		}
		if !hasError(handled(), "cannot classify this one") {
			t.Error("the panic never reached the OpenTelemetry error handler")
		}
	})
}

// TestBadCallOptions: CallScope("") and CallClassifier(nil) fail the call
// with InvalidArgument naming the option, before it is sent or admitted,
// whatever the other options; an option overridden by a later one of its
// kind is no longer bad.
func TestBadCallOptions(t *testing.T) {
	forEachCallAndCoordinator(t, func(t *testing.T, c coordinator.Coordinator, method string, call func(context.Context, testgrpc.TestServiceClient, ...grpc.CallOption) error) {
		tc := newTestCoordinator(t, c)
		b := newBreaker(t, tc, WithAdmissionCache(0))
		svc := &service{}
		client := testgrpc.NewTestServiceClient(dial(t, serveTest(t, svc), b))
		ctx := context.Background()
		for _, tt := range []struct {
			opts []grpc.CallOption
			want string
		}{
			{[]grpc.CallOption{CallScope("")}, "CallScope"},
			{[]grpc.CallOption{CallClassifier(nil)}, "CallClassifier"},
			{[]grpc.CallOption{Unprotected(), CallScope("")}, "CallScope"},
			{[]grpc.CallOption{CallScope("payments"), CallClassifier(nil)}, "CallClassifier"},
			{[]grpc.CallOption{CallScope("payments"), CallScope("")}, "CallScope"},
		} {
			err := call(ctx, client, tt.opts...)
			if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), method) {
				t.Errorf("call with a bad %s: %v, want InvalidArgument naming the option and the method", tt.want, err)
			}
		}
		if n := svc.calls.Load(); n != 0 {
			t.Errorf("%d calls with a bad option reached the server", n)
		}
		if n := tc.admits.Load(); n != 0 {
			t.Errorf("calls with a bad option made %d admissions", n)
		}
		if err := call(ctx, client, CallScope(""), CallScope("payments"), CallClassifier(nil), CallClassifier(DefaultClassifier)); err != nil {
			t.Errorf("bad options overridden by good ones: %v, want the call made", err)
		}
	})
}

// TestCallOptionsLastWins: of several options of one kind the last wins,
// so an option given to a call overrides the ClientConn's default.
func TestCallOptionsLastWins(t *testing.T) {
	m, tc := memoryWith(t, coordinatortest.NewClock())
	// The default policy: the failures below do not trip "closed".
	p := coordinator.DefaultPolicy()
	if _, err := m.Isolate(context.Background(), coordinator.CommandRequest{Scope: "open", Policy: p, Note: coordinator.Note{Reason: "test"}}); err != nil {
		t.Fatal(err)
	}
	b := newBreaker(t, tc, WithPolicy(p))
	alwaysFailure := func(context.Context, string, error) Class { return Failure }
	cc := dial(t, serveTest(t, &service{}), b,
		grpc.WithDefaultCallOptions(CallScope("open"), CallClassifier(alwaysFailure)))
	client := testgrpc.NewTestServiceClient(cc)
	call := func(opts ...grpc.CallOption) error {
		_, err := client.EmptyCall(context.Background(), &testpb.Empty{}, opts...)
		return err
	}
	for _, tt := range []struct {
		name     string
		opts     []grpc.CallOption
		rejected bool
	}{
		{"the ClientConn's default", nil, true},
		{"the call's own", []grpc.CallOption{CallScope("closed")}, false},
		{"closed, then open", []grpc.CallOption{CallScope("closed"), CallScope("open")}, true},
		{"open, then closed", []grpc.CallOption{CallScope("open"), CallScope("closed")}, false},
	} {
		if err := call(tt.opts...); errors.Is(err, ErrOpen) != tt.rejected {
			t.Errorf("%s: %v, want rejected %v", tt.name, err, tt.rejected)
		}
	}
	alwaysSuccess := func(context.Context, string, error) Class { return Success }
	if err := call(CallScope("closed"), CallClassifier(alwaysSuccess), CallClassifier(alwaysFailure), CallClassifier(alwaysSuccess)); err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	// The calls admitted in "closed": the first two classified by the
	// ClientConn's default, the last by the last classifier it was given.
	var got []bool
	for _, o := range tc.outcomes() {
		got = append(got, o.Failure)
	}
	if want := []bool{true, true, false}; !slices.Equal(got, want) {
		t.Errorf("outcomes Failure = %v, want %v", got, want)
	}
}

// TestCallOptionsThroughTheShortcuts: the Breakers made by Unary and
// Stream read per-call options; two Breakers over one coordinator share
// a scope named by CallScope.
func TestCallOptionsThroughTheShortcuts(t *testing.T) {
	_, tc := memoryWith(t, coordinatortest.NewClock())
	p := tripPolicy()
	svc := &service{}
	cc, err := grpc.NewClient(serveTest(t, svc),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithUnaryInterceptor(Unary(tc, WithPolicy(p), WithAdmissionCache(0))),
		grpc.WithStreamInterceptor(Stream(tc, WithPolicy(p), WithAdmissionCache(0))),
	)
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	client := testgrpc.NewTestServiceClient(cc)
	ctx := context.Background()
	unary, stream := callKinds[0].call, callKinds[1].call

	svc.setErr(status.Error(codes.Unavailable, "down"))
	unary(ctx, client, CallScope("payments"))
	eventually(t, "payments to open", func() bool { return state(t, tc, "payments", p) == open })
	if err := stream(ctx, client, CallScope("payments")); !errors.Is(err, ErrOpen) {
		t.Errorf("stream naming the scope a unary call tripped: %v, want rejected", err)
	}

	svc.setErr(nil)
	admits := tc.admits.Load()
	for name, call := range map[string]func(context.Context, testgrpc.TestServiceClient, ...grpc.CallOption) error{"unary": unary, "stream": stream} {
		if err := call(ctx, client, CallScope("payments"), Unprotected()); err != nil {
			t.Errorf("unprotected %s: %v, want it sent", name, err)
		}
		if err := call(ctx, client, CallScope("")); status.Code(err) != codes.InvalidArgument {
			t.Errorf("%s with CallScope(\"\"): %v, want InvalidArgument", name, err)
		}
	}
	if n := tc.admits.Load() - admits; n != 0 {
		t.Errorf("%d admissions, want none", n)
	}

	// Successes that the call's own classifier calls failures trip a scope.
	alwaysFailure := CallClassifier(func(context.Context, string, error) Class { return Failure })
	unary(ctx, client, CallScope("by-unary"), alwaysFailure)
	stream(ctx, client, CallScope("by-stream"), alwaysFailure)
	for _, scope := range []string{"by-unary", "by-stream"} {
		eventually(t, scope+" to open", func() bool { return state(t, tc, scope, p) == open })
	}
}

// hasError reports whether one of errs says substr.
func hasError(errs []error, substr string) bool {
	for _, err := range errs {
		if strings.Contains(err.Error(), substr) {
			return true
		}
	}
	return false
}
