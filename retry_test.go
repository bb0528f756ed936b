package cbgrpc_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/cbgrpc/cbgrpc"
	"github.com/cbgrpc/cbgrpc/coordinator"
	"github.com/cbgrpc/cbgrpc/coordinator/memory"
)

func TestRetryOn(t *testing.T) {
	rejection := &cbgrpc.OpenError{Scope: "dep", State: coordinator.StateOpen, RetryAfter: time.Second}
	retriable := cbgrpc.RetryOn(codes.Unavailable, codes.ResourceExhausted)
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"success", nil, false},
		{"Unavailable", status.Error(codes.Unavailable, "connection refused"), true},
		{"ResourceExhausted", status.Error(codes.ResourceExhausted, "quota"), true},
		{"a code not given", status.Error(codes.NotFound, "no such row"), false},
		{"not a status error", errors.New("boom"), false},
		{"deadline", context.DeadlineExceeded, false},
		{"rejection", rejection, false},
		{"wrapped rejection", fmt.Errorf("calling dep: %w", rejection), false},
	} {
		if got := retriable(tc.err); got != tc.want {
			t.Errorf("RetryOn(Unavailable, ResourceExhausted)(%s: %v) = %v, want %v", tc.name, tc.err, got, tc.want)
		}
	}
	if cbgrpc.RetryOn()(status.Error(codes.Unavailable, "down")) {
		t.Error("RetryOn() retries Unavailable; want no code retried")
	}
}

// What a Breaker returns for a rejected call has code Unavailable, which a
// retry interceptor retries by default, and RetryOn(Unavailable) does not
// retry it, while it retries the dependency's own Unavailable.
func TestRetryOnRejectionByBreaker(t *testing.T) {
	policy := coordinator.DefaultPolicy()
	policy.ConsecutiveFailures = 1
	b, err := cbgrpc.New(memory.New(), cbgrpc.WithPolicy(policy))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	intercept := b.UnaryClientInterceptor()
	failing := func(context.Context, string, any, any, *grpc.ClientConn, ...grpc.CallOption) error {
		return status.Error(codes.Unavailable, "connection refused")
	}
	call := func() error {
		return intercept(context.Background(), "/pkg.Service/Method", nil, nil, nil, failing)
	}
	retriable := cbgrpc.RetryOn(codes.Unavailable)

	if err := call(); !retriable(err) {
		t.Fatalf("the dependency's own failure %v: RetryOn(Unavailable) says not retriable", err)
	}
	// The failure trips the breaker once it is recorded, off the call's path.
	deadline := time.Now().Add(10 * time.Second)
	for err = call(); !errors.Is(err, cbgrpc.ErrOpen); err = call() {
		if time.Now().After(deadline) {
			t.Fatalf("no rejection within 10s of a failure under ConsecutiveFailures 1; last error %v", err)
		}
		time.Sleep(time.Millisecond)
	}
	if code := status.Code(err); code != codes.Unavailable {
		t.Errorf("rejection %v has code %v, want Unavailable", err, code)
	}
	if retriable(err) {
		t.Errorf("rejection %v: RetryOn(Unavailable) says retriable", err)
	}
}

// With go-grpc-middleware v2's retry interceptor, outside the breaker:
//
//	retry.UnaryClientInterceptor(retry.WithMax(3),
//		retry.WithRetriable(cbgrpc.RetryOn(retry.DefaultRetriableCodes...)))
func ExampleRetryOn() {
	retriable := cbgrpc.RetryOn(codes.Unavailable, codes.ResourceExhausted)
	fmt.Println(retriable(status.Error(codes.Unavailable, "connection refused")))
	fmt.Println(retriable(&cbgrpc.OpenError{Scope: "inventory", State: coordinator.StateOpen}))
	// Output:
	// true
	// false
}
