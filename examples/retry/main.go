// Command retry shows the breaker under go-grpc-middleware v2's retry
// interceptor. The breaker goes inside (after) the retry interceptor, so
// each attempt is admitted and counted on its own. A rejection carries
// Unavailable, which the retry interceptor retries by default: each
// rejected call is then attempted again and again, rejected each time, and
// waits out the backoff in between. One option fixes it:
//
//	retry.WithRetriable(cbgrpc.RetryOn(retry.DefaultRetriableCodes...))
//
// which keeps retrying the dependency's own Unavailable and
// ResourceExhausted, and never a rejection.
//
//	go run ./examples/retry
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"os"
	"sync/atomic"
	"time"

	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/retry"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/status"

	"github.com/cbgrpc/cbgrpc"
	"github.com/cbgrpc/cbgrpc/coordinator"
	"github.com/cbgrpc/cbgrpc/coordinator/memory"
)

// A setup is one way to configure the retry interceptor.
type setup struct {
	name string
	opts []retry.CallOption
}

var (
	// byDefault retries what the retry interceptor retries by default
	// (Unavailable and ResourceExhausted): rejections too.
	byDefault = setup{"retry.WithMax(3)", []retry.CallOption{
		retry.WithMax(3),
	}}
	// withRetryOn retries the same codes, except a rejection.
	withRetryOn = setup{"retry.WithMax(3), retry.WithRetriable(cbgrpc.RetryOn(retry.DefaultRetriableCodes...))", []retry.CallOption{
		retry.WithMax(3),
		retry.WithRetriable(cbgrpc.RetryOn(retry.DefaultRetriableCodes...)),
	}}
)

// failing answers Unavailable to every call, counting them.
type failing struct {
	testgrpc.UnimplementedTestServiceServer
	served atomic.Int64
}

func (f *failing) EmptyCall(context.Context, *testpb.Empty) (*testpb.Empty, error) {
	f.served.Add(1)
	return nil, status.Error(codes.Unavailable, "overloaded")
}

// result is what one call did, attempt by attempt.
type result struct {
	attempts int64 // attempts that reached the breaker
	rejected int64 // attempts the breaker rejected
	served   int64 // attempts that reached the dependency
	took     time.Duration
	err      error
}

func (r result) String() string {
	attempts := "attempts"
	if r.attempts == 1 {
		attempts = "attempt"
	}
	return fmt.Sprintf("%d %s: %d reached the dependency, %d rejected by the breaker; %s after %v",
		r.attempts, attempts, r.served, r.rejected, status.Code(r.err), r.took.Round(time.Millisecond))
}

func main() {
	if err := demo(os.Stdout); err != nil {
		log.Fatal(err)
	}
}

func demo(w io.Writer) error {
	fmt.Fprintln(w, "A dependency answers Unavailable to every call; its breaker trips after 3 failures in a row.")
	fmt.Fprintln(w, "Each client: grpc.WithChainUnaryInterceptor(retry.UnaryClientInterceptor(opts...), breaker.UnaryClientInterceptor())")
	for _, s := range []setup{byDefault, withRetryOn} {
		trip, open, err := try(s)
		if err != nil {
			return err
		}
		fmt.Fprintf(w, "\nopts: %s\n", s.name)
		fmt.Fprintf(w, "  a call, breaker closed: %v\n", trip)
		fmt.Fprintf(w, "  a call, breaker open:   %v\n", open)
	}
	return nil
}

// try makes two calls with setup s to a dependency that fails: the first
// trips the breaker, the second meets it open.
func try(s setup) (trip, open result, err error) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return trip, open, err
	}
	srv := grpc.NewServer()
	dep := &failing{}
	testgrpc.RegisterTestServiceServer(srv, dep)
	go srv.Serve(lis)
	defer srv.Stop()

	policy := coordinator.DefaultPolicy()
	policy.ConsecutiveFailures = 3
	opened := make(chan struct{}, 1)
	breaker, err := cbgrpc.New(memory.New(),
		cbgrpc.WithPolicy(policy),
		cbgrpc.WithOnTransition(func(t coordinator.Transition) {
			if t.To == coordinator.StateOpen {
				select {
				case opened <- struct{}{}:
				default: // told already: at least once
				}
			}
		}),
	)
	if err != nil {
		return trip, open, err
	}
	defer breaker.Close()

	// count sits between the retry interceptor and the breaker: it sees
	// every attempt, and whether the breaker rejected it.
	var attempts, rejected atomic.Int64
	count := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		attempts.Add(1)
		err := invoker(ctx, method, req, reply, cc, opts...)
		if errors.Is(err, cbgrpc.ErrOpen) {
			rejected.Add(1)
		}
		return err
	}
	conn, err := grpc.NewClient(lis.Addr().String(),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithChainUnaryInterceptor(retry.UnaryClientInterceptor(s.opts...), count, breaker.UnaryClientInterceptor()),
	)
	if err != nil {
		return trip, open, err
	}
	defer conn.Close()
	client := testgrpc.NewTestServiceClient(conn)

	call := func() result {
		attempts.Store(0)
		rejected.Store(0)
		served := dep.served.Load()
		start := time.Now()
		_, err := client.EmptyCall(context.Background(), &testpb.Empty{})
		return result{attempts.Load(), rejected.Load(), dep.served.Load() - served, time.Since(start), err}
	}
	trip = call()
	// The trip is recorded off the call's path.
	select {
	case <-opened:
	case <-time.After(10 * time.Second):
		return trip, open, fmt.Errorf("%s: the breaker did not open within 10s of %v", s.name, trip)
	}
	return trip, call(), nil
}
