package cbgrpc

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/status"

	"github.com/cbgrpc/cbgrpc/coordinator"
	"github.com/cbgrpc/cbgrpc/coordinator/coordinatortest"
	"github.com/cbgrpc/cbgrpc/coordinator/memory"
)

// fallbackLog is a Fallback that serves UnaryCall from a cache
// (Username "cached") and has no answer for any other method; it keeps
// the error of every call it is given.
type fallbackLog struct{ errs []error }

func (l *fallbackLog) serve(_ context.Context, method string, _, reply any, err error) error {
	l.errs = append(l.errs, err)
	if method != "/grpc.testing.TestService/UnaryCall" {
		return status.Error(codes.Aborted, "no cached answer")
	}
	reply.(*testpb.SimpleResponse).Username = "cached"
	return nil
}

// TestFallbackServesRejections: a rejected unary call returns what the
// fallback makes of the rejection: its reply, or its error. Streams are
// not served. Nothing of it reaches the server or counts as an outcome.
func TestFallbackServesRejections(t *testing.T) {
	onEachCoordinator(t, func(t *testing.T, c coordinator.Coordinator) {
		tc := newTestCoordinator(t, c)
		p := tripPolicy()
		var fb fallbackLog
		b := newBreaker(t, tc, WithPolicy(p), WithFallback(fb.serve),
			WithScope(func(context.Context, string, string) string { return "inventory" }))
		svc := &service{}
		client := testgrpc.NewTestServiceClient(dial(t, serveTest(t, svc), b))
		ctx := context.Background()
		tripScope(t, c, "inventory", p)

		resp, err := client.UnaryCall(ctx, &testpb.SimpleRequest{})
		if err != nil || resp.GetUsername() != "cached" {
			t.Errorf("rejected call with a fallback: %v, %v; want the fallback's reply", resp, err)
		}
		var oe *OpenError
		if len(fb.errs) != 1 || !errors.As(fb.errs[0], &oe) || oe.Scope != "inventory" {
			t.Fatalf("the fallback got %v, want one rejection of inventory", fb.errs)
		}
		if _, err := client.EmptyCall(ctx, &testpb.Empty{}); status.Code(err) != codes.Aborted {
			t.Errorf("rejected call whose fallback fails: %v, want the fallback's Aborted", err)
		}
		if err := callKinds[1].call(ctx, client); !errors.Is(err, ErrOpen) {
			t.Errorf("rejected stream: %v, want the rejection", err)
		}
		if n := len(fb.errs); n != 2 {
			t.Errorf("the fallback was called %d times, want 2 (the unary calls)", n)
		}
		if n := svc.calls.Load(); n != 0 {
			t.Errorf("%d calls reached the server, want none", n)
		}
		if err := b.Close(); err != nil {
			t.Fatal(err)
		}
		if got := tc.outcomes(); len(got) != 0 {
			t.Errorf("outcomes recorded: %+v, want none", got)
		}
	})
}

// TestFallbackServesFailClosed: a call rejected because the coordinator
// is down and the Breaker fails closed is a rejection like any other.
func TestFallbackServesFailClosed(t *testing.T) {
	tc := newTestCoordinator(t, memory.New())
	tc.set(modeFail)
	var fb fallbackLog
	b := newBreaker(t, tc, WithCoordinatorFailure(FailClosed), WithFallback(fb.serve))
	client := testgrpc.NewTestServiceClient(dial(t, serveTest(t, &service{}), b))
	resp, err := client.UnaryCall(context.Background(), &testpb.SimpleRequest{})
	if err != nil || resp.GetUsername() != "cached" {
		t.Errorf("call rejected by FailClosed: %v, %v; want the fallback's reply", resp, err)
	}
	if len(fb.errs) != 1 || !errors.Is(fb.errs[0], ErrOpen) {
		t.Errorf("the fallback got %v, want one rejection", fb.errs)
	}
}

// TestFallbackNotCalledWhenTheCallerGivesUp: a call whose context ends
// while it waits for its admission is no rejection: it returns its
// context's error, unserved.
func TestFallbackNotCalledWhenTheCallerGivesUp(t *testing.T) {
	_, tc := memoryWith(t, coordinatortest.NewClock())
	defer tc.unblock()
	var fb fallbackLog
	b := newBreaker(t, tc, WithCoordinatorTimeout(time.Minute), WithFallback(fb.serve))
	client := testgrpc.NewTestServiceClient(dial(t, serveTest(t, &service{}), b))
	tc.set(modeBlock)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if _, err := client.UnaryCall(ctx, &testpb.SimpleRequest{}); status.Code(err) != codes.DeadlineExceeded {
		t.Errorf("call whose deadline passed during its admission: %v, want DeadlineExceeded", err)
	}
	if len(fb.errs) != 0 {
		t.Errorf("the fallback was called with %v, want never", fb.errs)
	}
	tc.unblock()
}

// TestFallbackNotCalledOnServerFailures: by default a fallback serves
// rejections only: a call that fails at the server returns its own error,
// and its failure counts. Unprotected calls are never served.
func TestFallbackNotCalledOnServerFailures(t *testing.T) {
	onEachCoordinator(t, func(t *testing.T, c coordinator.Coordinator) {
		tc := newTestCoordinator(t, c)
		var fb fallbackLog
		b := newBreaker(t, tc, WithFallback(fb.serve))
		svc := &service{}
		svc.setErr(status.Error(codes.Unavailable, "down"))
		client := testgrpc.NewTestServiceClient(dial(t, serveTest(t, svc), b))
		ctx := context.Background()
		for _, opts := range [][]grpc.CallOption{nil, {Unprotected()}} {
			if _, err := client.UnaryCall(ctx, &testpb.SimpleRequest{}, opts...); status.Code(err) != codes.Unavailable || errors.Is(err, ErrOpen) {
				t.Errorf("failing call: %v, want the server's Unavailable", err)
			}
		}
		if len(fb.errs) != 0 {
			t.Errorf("the fallback was called with %v, want never", fb.errs)
		}
		if err := b.Close(); err != nil {
			t.Fatal(err)
		}
		if got := tc.outcomes(); len(got) != 1 || !got[0].Failure {
			t.Errorf("outcomes %+v, want the protected call's failure", got)
		}
	})
}

// TestFallbackOnFailuresWhenAsked: under WithFallbackOnFailures the
// fallback also serves the calls that fail as the call's classifier counts
// failures, not answers such as NotFound; the failures count all the
// same; rejections are served too.
func TestFallbackOnFailuresWhenAsked(t *testing.T) {
	onEachCoordinator(t, func(t *testing.T, c coordinator.Coordinator) {
		tc := newTestCoordinator(t, c)
		var fb fallbackLog
		// The default policy: three failures do not trip it.
		b := newBreaker(t, tc, WithFallbackOnFailures(fb.serve))
		svc := &service{}
		client := testgrpc.NewTestServiceClient(dial(t, serveTest(t, svc), b))
		ctx := context.Background()
		for _, tt := range []struct {
			name   string
			code   codes.Code
			opts   []grpc.CallOption
			served bool
		}{
			{"Unavailable", codes.Unavailable, nil, true},
			{"NotFound", codes.NotFound, nil, false},
			{"NotFound as a failure for this call", codes.NotFound, []grpc.CallOption{CallClassifier(FailOn(codes.NotFound))}, true},
			{"Internal as a success for this call", codes.Internal, []grpc.CallOption{CallClassifier(FailOn())}, false},
		} {
			svc.setErr(status.Error(tt.code, "told to"))
			served := len(fb.errs)
			resp, err := client.UnaryCall(ctx, &testpb.SimpleRequest{}, tt.opts...)
			switch {
			case tt.served && (err != nil || resp.GetUsername() != "cached"):
				t.Errorf("%s: %v, %v; want the fallback's reply", tt.name, resp, err)
			case tt.served && (len(fb.errs) != served+1 || status.Code(fb.errs[served]) != tt.code || errors.Is(fb.errs[served], ErrOpen)):
				t.Errorf("%s: the fallback got %v, want the server's error", tt.name, fb.errs[served:])
			case !tt.served && (status.Code(err) != tt.code || len(fb.errs) != served):
				t.Errorf("%s: %v, fallback called %d times; want the server's error, and no fallback", tt.name, err, len(fb.errs)-served)
			}
		}
		// An isolated scope: the rejection is served as well, and not counted.
		if _, err := c.(coordinator.Controller).Isolate(ctx, coordinator.CommandRequest{Scope: "inventory", Policy: coordinator.DefaultPolicy(), Note: coordinator.Note{Reason: "test"}}); err != nil {
			t.Fatal(err)
		}
		served := len(fb.errs)
		if resp, err := client.UnaryCall(ctx, &testpb.SimpleRequest{}, CallScope("inventory")); err != nil || resp.GetUsername() != "cached" {
			t.Errorf("rejection: %v, %v; want the fallback's reply", resp, err)
		}
		if len(fb.errs) != served+1 || !errors.Is(fb.errs[served], ErrOpen) {
			t.Errorf("the fallback got %v, want the rejection", fb.errs[served:])
		}
		if err := b.Close(); err != nil {
			t.Fatal(err)
		}
		var failures []bool
		for _, o := range tc.outcomes() {
			failures = append(failures, o.Failure)
		}
		if want := []bool{true, false, true, false}; !slices.Equal(failures, want) {
			t.Errorf("outcomes Failure = %v, want %v: a failure served by the fallback still counts", failures, want)
		}
	})
}

// TestPanickingFallbackIsContained: a fallback that panics leaves the
// call its own error, a rejection or the server's, and the panic goes to
// the OpenTelemetry error handler.
func TestPanickingFallbackIsContained(t *testing.T) {
	onEachCoordinator(t, func(t *testing.T, c coordinator.Coordinator) {
		handled := otelErrors(t)
		b := newBreaker(t, c, WithPolicy(tripPolicy()), WithFallbackOnFailures(func(context.Context, string, any, any, error) error {
			panic("the cache is gone")
		}))
		svc := &service{}
		svc.setErr(status.Error(codes.Unavailable, "down"))
		client := testgrpc.NewTestServiceClient(dial(t, serveTest(t, svc), b))
		ctx := context.Background()

		if _, err := client.UnaryCall(ctx, &testpb.SimpleRequest{}); status.Code(err) != codes.Unavailable || errors.Is(err, ErrOpen) {
			t.Errorf("failure served by a panicking fallback: %v, want the server's Unavailable", err)
		}
		// The failure trips the breaker once it is recorded.
		var err error
		eventually(t, "a rejection", func() bool {
			_, err = client.UnaryCall(ctx, &testpb.SimpleRequest{})
			return errors.Is(err, ErrOpen)
		})
		if status.Code(err) != codes.Unavailable {
			t.Errorf("rejection served by a panicking fallback: %v, want the rejection", err)
		}
		if !hasError(handled(), "the cache is gone") || !hasError(handled(), "/grpc.testing.TestService/UnaryCall") {
			t.Errorf("otel.Handle got %v; want the panic, naming the method", handled())
		}
	})
}

// TestFallbackThroughTheShortcut: the Breaker made by Unary has the
// fallback too.
func TestFallbackThroughTheShortcut(t *testing.T) {
	p := tripPolicy()
	m := memory.New()
	tripScope(t, m, "inventory", p)
	var fb fallbackLog
	cc, err := grpc.NewClient(serveTest(t, &service{}),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithUnaryInterceptor(Unary(m, WithPolicy(p), WithFallback(fb.serve))),
	)
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	resp, err := testgrpc.NewTestServiceClient(cc).UnaryCall(context.Background(), &testpb.SimpleRequest{}, CallScope("inventory"))
	if err != nil || resp.GetUsername() != "cached" {
		t.Errorf("rejected call: %v, %v; want the fallback's reply", resp, err)
	}
}

// TestFallbackOptions: nil is ignored, and of WithFallback and
// WithFallbackOnFailures the last given wins.
func TestFallbackOptions(t *testing.T) {
	var fb fallbackLog
	for _, tt := range []struct {
		name            string
		opts            []Option
		set, onFailures bool
	}{
		{"WithFallback(nil)", []Option{WithFallback(nil)}, false, false},
		{"WithFallbackOnFailures(nil)", []Option{WithFallbackOnFailures(nil)}, false, false},
		{"WithFallback", []Option{WithFallback(fb.serve)}, true, false},
		{"on failures, then not", []Option{WithFallbackOnFailures(fb.serve), WithFallback(fb.serve)}, true, false},
		{"not, then on failures", []Option{WithFallback(fb.serve), WithFallbackOnFailures(fb.serve)}, true, true},
		{"on failures, then nil", []Option{WithFallbackOnFailures(fb.serve), WithFallback(nil)}, true, true},
	} {
		c := newConfig(tt.opts)
		if (c.fallback != nil) != tt.set || c.fallbackOn != tt.onFailures {
			t.Errorf("%s: fallback set %v, on failures %v; want %v, %v", tt.name, c.fallback != nil, c.fallbackOn, tt.set, tt.onFailures)
		}
	}
}
