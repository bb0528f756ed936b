package cbgrpc

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/cbgrpc/cbgrpc/coordinator"
	"github.com/cbgrpc/cbgrpc/coordinator/memory"
	cbredis "github.com/cbgrpc/cbgrpc/coordinator/redis"
	"github.com/cbgrpc/cbgrpc/internal/redistest"
)

func retryInfo(t *testing.T, d *durationpb.Duration) *status.Status {
	t.Helper()
	st, err := status.New(codes.ResourceExhausted, "slow down").WithDetails(&errdetails.RetryInfo{RetryDelay: d})
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func TestPushbackOf(t *testing.T) {
	plain := status.New(codes.Unavailable, "down")
	for _, c := range []struct {
		name    string
		st      *status.Status
		trailer metadata.MD
		period  time.Duration
		reason  string
		ok      bool
	}{
		{"none", plain, nil, 0, "", false},
		{"trailer", plain, metadata.Pairs(pushbackTrailer, "2000"), 2 * time.Second, "server pushback 2s", true},
		{"trailer zero: retry now", plain, metadata.Pairs(pushbackTrailer, "0"), 0, "", false},
		{"trailer negative", plain, metadata.Pairs(pushbackTrailer, "-1"), stayAway, "do not call again soon", true},
		{"trailer not a number", plain, metadata.Pairs(pushbackTrailer, "soon"), stayAway, `"soon", do not call again soon`, true},
		{"trailer absurd", plain, metadata.Pairs(pushbackTrailer, "99999999999999999"), 24 * time.Hour, "server pushback 24h0m0s", true},
		{"RetryInfo", retryInfo(t, durationpb.New(1500*time.Millisecond)), nil, 1500 * time.Millisecond, "server pushback 1.5s (RetryInfo)", true},
		{"RetryInfo zero: retry now", retryInfo(t, durationpb.New(0)), nil, 0, "", false},
		{"RetryInfo negative", retryInfo(t, durationpb.New(-time.Second)), nil, stayAway, "unreadable delay", true},
		{"RetryInfo invalid", retryInfo(t, &durationpb.Duration{Seconds: 1, Nanos: -5}), nil, stayAway, "unreadable delay", true},
		{"RetryInfo absurd", retryInfo(t, &durationpb.Duration{Seconds: 315576000000}), nil, time.Duration(1<<63 - 1), "RetryInfo", true},
		{"trailer before RetryInfo", retryInfo(t, durationpb.New(time.Minute)), metadata.Pairs(pushbackTrailer, "10"), 10 * time.Millisecond, "server pushback 10ms", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			period, reason, ok := pushbackOf(c.st, c.trailer)
			if ok != c.ok || ok && (period != c.period || !strings.Contains(reason, c.reason)) {
				t.Errorf("pushbackOf = %v, %q, %v; want %v, %q, %v", period, reason, ok, c.period, c.reason, c.ok)
			}
		})
	}
}

func TestPushbackRuleApplies(t *testing.T) {
	r := &pushbackRule{codes: map[codes.Code]bool{codes.ResourceExhausted: true}, methods: methodSet{"/pkg.Svc/": {}, "/other.S/M": {}}}
	for _, c := range []struct {
		method string
		code   codes.Code
		want   bool
	}{
		{"/pkg.Svc/Get", codes.ResourceExhausted, true},
		{"/other.S/M", codes.ResourceExhausted, true},
		{"/other.S/N", codes.ResourceExhausted, false},
		{"/pkg.Svc/Get", codes.Unavailable, false},
	} {
		if got := r.applies(c.method, c.code); got != c.want {
			t.Errorf("applies(%s, %v) = %v; want %v", c.method, c.code, got, c.want)
		}
	}
	if (*pushbackRule)(nil).applies("/pkg.Svc/Get", codes.ResourceExhausted) {
		t.Error("no rule (the default) applies")
	}
	every := &pushbackRule{codes: map[codes.Code]bool{codes.Unavailable: true}}
	if !every.applies("/any.S/M", codes.Unavailable) {
		t.Error("a rule with no methods applies to every method")
	}
}

// pushingBack answers every EmptyCall with ResourceExhausted and the
// pushback trailer set to its value, or, when retry is set, a RetryInfo
// detail with that delay; and every stream with the trailer.
type pushingBack struct {
	testgrpc.UnimplementedTestServiceServer
	trailer string
	retry   *durationpb.Duration
	calls   atomic.Int64
}

func (s *pushingBack) EmptyCall(ctx context.Context, _ *testpb.Empty) (*testpb.Empty, error) {
	s.calls.Add(1)
	if s.retry != nil {
		st, err := status.New(codes.ResourceExhausted, "overloaded").WithDetails(&errdetails.RetryInfo{RetryDelay: s.retry})
		if err != nil {
			return nil, err
		}
		return nil, st.Err()
	}
	grpc.SetTrailer(ctx, metadata.Pairs(pushbackTrailer, s.trailer))
	return nil, status.Error(codes.ResourceExhausted, "overloaded")
}

func (s *pushingBack) StreamingOutputCall(_ *testpb.StreamingOutputCallRequest, st testgrpc.TestService_StreamingOutputCallServer) error {
	s.calls.Add(1)
	st.SetTrailer(metadata.Pairs(pushbackTrailer, s.trailer))
	return status.Error(codes.ResourceExhausted, "overloaded")
}

// TestServerPushbackOpensTheFleetOnce: four replicas send a burst of 1,000
// calls, each answered with a pushback of 2 s; the scope opens fleet-wide
// once, for 2 s, with the pushback as its reason, and the replicas then
// reject. ResourceExhausted alone is no failure: without the option, the
// same burst opens nothing.
func TestServerPushbackOpensTheFleetOnce(t *testing.T) {
	coords := map[string]func(t *testing.T) coordinator.Coordinator{
		"memory": func(*testing.T) coordinator.Coordinator { return memory.New() },
		"redis": func(t *testing.T) coordinator.Coordinator {
			srv := redistest.Start(t)
			return cbredis.New(srv.Client(t))
		},
	}
	for name, mk := range coords {
		t.Run(name, func(t *testing.T) {
			c := mk(t)
			p := coordinator.DefaultPolicy()
			p.MaxOpenFor = time.Minute
			svc := &pushingBack{trailer: "2000"}
			addr := serveTest(t, svc)
			const scope = "inventory"
			var tracings []*tracing
			var clients []testgrpc.TestServiceClient
			var breakers []*Breaker
			for range 4 {
				tr := newTracing()
				tracings = append(tracings, tr)
				// A 1 s coordinator timeout: under CI's load a first admission
				// over a fresh connection can take more than 50 ms, and the
				// calls the failure policy then lets through belong to no
				// generation, so their pushbacks are stale (CI saw 1,000
				// reach the server and no transition once).
				b := newBreaker(t, c, WithPolicy(p), WithTracerProvider(tr.tp),
					WithServerPushback([]codes.Code{codes.ResourceExhausted}),
					WithScope(func(context.Context, string, string) string { return scope }),
					WithCoordinatorTimeout(time.Second))
				breakers = append(breakers, b)
				clients = append(clients, testgrpc.NewTestServiceClient(dial(t, addr, b)))
			}
			// 32 callers, 8 a replica, 1000 calls in all: a burst a fleet's
			// callers make, not 1000 goroutines at once.
			var wg sync.WaitGroup
			var sent atomic.Int64
			for i := range 32 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for sent.Add(1) <= 1000 {
						clients[i%4].EmptyCall(context.Background(), &testpb.Empty{})
					}
				}()
			}
			wg.Wait()
			for _, b := range breakers {
				eventually(t, "the pushes to be sent", func() bool {
					n := 0
					b.pushing.Range(func(any, any) bool { n++; return true })
					return n == 0
				})
			}
			s, err := c.Snapshot(context.Background(), scope, p)
			if err != nil {
				t.Fatal(err)
			}
			spans := 0
			for _, tr := range tracings {
				spans += len(tr.transitions(coordinator.StateClosed, coordinator.StateOpen))
			}
			t.Logf("a burst of 1000 pushbacks (%d reached the server): %d closed -> open transitions; %v, last trip %+v", svc.calls.Load(), spans, s.State, s.LastTrip)
			if spans != 1 {
				t.Errorf("%d closed -> open transitions across the fleet; want 1", spans)
			}
			if s.State != coordinator.StateOpen || s.LastTrip.Reason != "server pushback 2s" || s.OpenUntil.Sub(s.LastTrip.At) != 2*time.Second {
				t.Errorf("after the burst: %+v; want open for 2s by the server's pushback", s)
			}
			reached := svc.calls.Load()
			_, err = clients[0].EmptyCall(context.Background(), &testpb.Empty{})
			if !errors.Is(err, ErrOpen) || svc.calls.Load() != reached {
				t.Errorf("a call after the pushback: %v; want rejected without reaching the server", err)
			}
		})
	}
}

// TestServerPushbackOnlyWhereAsked: off by default; other codes and
// methods than the option's are left alone; a malformed trailer asks for
// the cap; a stream's trailer counts too.
func TestServerPushbackOnlyWhereAsked(t *testing.T) {
	p := coordinator.DefaultPolicy()
	p.MaxOpenFor = 20 * time.Second
	call := func(t *testing.T, trailer string, stream bool, opts ...Option) coordinator.Snapshot {
		t.Helper()
		c := memory.New()
		svc := &pushingBack{trailer: trailer}
		opts = append(opts, WithPolicy(p), WithScope(func(context.Context, string, string) string { return "s" }))
		b := newBreaker(t, c, opts...)
		client := testgrpc.NewTestServiceClient(dial(t, serveTest(t, svc), b))
		if stream {
			st, err := client.StreamingOutputCall(context.Background(), &testpb.StreamingOutputCallRequest{})
			if err == nil {
				_, err = st.Recv()
			}
			if status.Code(err) != codes.ResourceExhausted {
				t.Fatalf("stream: %v", err)
			}
		} else if _, err := client.EmptyCall(context.Background(), &testpb.Empty{}); status.Code(err) != codes.ResourceExhausted {
			t.Fatalf("call: %v", err)
		}
		eventually(t, "the push to be sent", func() bool {
			n := 0
			b.pushing.Range(func(any, any) bool { n++; return true })
			return n == 0
		})
		s, err := c.Snapshot(context.Background(), "s", p)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	exhausted := WithServerPushback([]codes.Code{codes.ResourceExhausted})
	if s := call(t, "2000", false); s.State != coordinator.StateClosed {
		t.Errorf("without the option: %v; want closed", s.State)
	}
	if s := call(t, "2000", false, WithServerPushback([]codes.Code{codes.Unavailable})); s.State != coordinator.StateClosed {
		t.Errorf("pushback on a code the option does not list: %v; want closed", s.State)
	}
	if s := call(t, "2000", false, WithServerPushback([]codes.Code{codes.ResourceExhausted}, "/other.Service/")); s.State != coordinator.StateClosed {
		t.Errorf("pushback on a method the option does not list: %v; want closed", s.State)
	}
	if s := call(t, "soon", false, exhausted); s.State != coordinator.StateOpen || s.OpenUntil.Sub(s.LastTrip.At) != p.MaxOpenFor {
		t.Errorf("a malformed trailer: %+v; want open for MaxOpenFor (%v)", s, p.MaxOpenFor)
	}
	if s := call(t, "1500", true, exhausted); s.State != coordinator.StateOpen || s.OpenUntil.Sub(s.LastTrip.At) != 1500*time.Millisecond {
		t.Errorf("a stream's pushback: %+v; want open for 1.5s", s)
	}
}

func TestServerPushbackBadConfiguration(t *testing.T) {
	for _, c := range []struct {
		name string
		c    coordinator.Coordinator
		opt  Option
		want string
	}{
		{"no codes", memory.New(), WithServerPushback(nil), "no codes"},
		{"OK", memory.New(), WithServerPushback([]codes.Code{codes.OK}), "codes.OK"},
		{"bad method", memory.New(), WithServerPushback([]codes.Code{codes.Unavailable}, "pkg.Svc/M"), `"pkg.Svc/M"`},
		{"no Pusher", newTestCoordinator(t, memory.New()), WithServerPushback([]codes.Code{codes.Unavailable}), "no coordinator.Pusher"},
	} {
		if _, err := New(c.c, c.opt); err == nil || !strings.Contains(err.Error(), "WithServerPushback") || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: New: %v; want an error naming WithServerPushback and %q", c.name, err, c.want)
		}
	}
}

// TestRedisPushBurstMakesOneTransition: 1,000 pushbacks answered to calls
// of one generation, sent by four replicas' coordinators at once, make one
// transition; the other 999 are stale.
func TestRedisPushBurstMakesOneTransition(t *testing.T) {
	srv := redistest.Start(t)
	p := coordinator.DefaultPolicy()
	var pushers []*cbredis.Coordinator
	for range 4 {
		pushers = append(pushers, cbredis.New(srv.Client(t)))
	}
	d, err := pushers[0].Admit(context.Background(), coordinator.AdmitRequest{Scope: "s", Policy: p, Claim: "c"})
	if err != nil {
		t.Fatal(err)
	}
	var transitions, stale, sent atomic.Int64
	var wg sync.WaitGroup
	for i := range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for sent.Add(1) <= 1000 {
				res, err := pushers[i%4].Push(context.Background(), coordinator.PushRequest{Scope: "s", Policy: p, Generation: d.Generation, Period: 2 * time.Second, Reason: "server pushback 2s"})
				if err != nil {
					t.Error(err)
					return
				}
				if res.Transition != nil {
					transitions.Add(1)
				}
				stale.Add(int64(res.Stale))
			}
		}()
	}
	wg.Wait()
	t.Logf("1000 pushbacks from 4 replicas: %d transitions, %d stale", transitions.Load(), stale.Load())
	if transitions.Load() != 1 || stale.Load() != 999 {
		t.Errorf("%d transitions, %d stale; want 1 and 999", transitions.Load(), stale.Load())
	}
}

// TestServerPushbackLeavesTheCallersOptionsAlone: reading the trailer adds
// a call option; the caller's slice, and its spare capacity, stay as they
// were.
func TestServerPushbackLeavesTheCallersOptionsAlone(t *testing.T) {
	svc := &pushingBack{trailer: "10"}
	b := newBreaker(t, memory.New(), WithServerPushback([]codes.Code{codes.ResourceExhausted}))
	cc := dial(t, serveTest(t, svc), b)
	mine := grpc.WaitForReady(false)
	opts := make([]grpc.CallOption, 1, 4)
	opts[0] = mine
	err := cc.Invoke(context.Background(), "/grpc.testing.TestService/EmptyCall", &testpb.Empty{}, &testpb.Empty{}, opts...)
	if status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("call: %v", err)
	}
	if spare := opts[:cap(opts)]; spare[0] != mine || spare[1] != nil {
		t.Errorf("the caller's options after the call: %v; want its own option and nothing written past it", spare)
	}
}

// TestServerPushbackOfZeroIsRetryNow: a pushback of 0, as the trailer or
// as RetryInfo, means "retry now" in gRPC's retry design: it opens
// nothing, and the call is counted as any other.
func TestServerPushbackOfZeroIsRetryNow(t *testing.T) {
	p := coordinator.DefaultPolicy()
	p.MaxOpenFor = time.Minute
	for name, svc := range map[string]*pushingBack{
		"trailer":   {trailer: "0"},
		"RetryInfo": {retry: durationpb.New(0)},
	} {
		t.Run(name, func(t *testing.T) {
			c := memory.New()
			b := newBreaker(t, c, WithPolicy(p), WithServerPushback([]codes.Code{codes.ResourceExhausted}),
				WithScope(func(context.Context, string, string) string { return "s" }))
			client := testgrpc.NewTestServiceClient(dial(t, serveTest(t, svc), b))
			if _, err := client.EmptyCall(context.Background(), &testpb.Empty{}); status.Code(err) != codes.ResourceExhausted {
				t.Fatalf("call: %v", err)
			}
			var s coordinator.Snapshot
			eventually(t, "the call to be recorded", func() bool {
				var err error
				if s, err = c.Snapshot(context.Background(), "s", p); err != nil {
					t.Fatal(err)
				}
				return s.Calls == 1 || s.State != coordinator.StateClosed
			})
			if s.State != coordinator.StateClosed || s.LastTrip.Reason != "" {
				t.Errorf("after a pushback of 0: %v, last trip %+v; want closed, the call counted", s.State, s.LastTrip)
			}
			if _, err := client.EmptyCall(context.Background(), &testpb.Empty{}); errors.Is(err, ErrOpen) || svc.calls.Load() != 2 {
				t.Errorf("the next call: %v; want it to reach the server", err)
			}
		})
	}
}
