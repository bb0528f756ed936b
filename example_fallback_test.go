package cbgrpc_test

import (
	"context"
	"errors"
	"fmt"
	"log"

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

func ExampleWithFallback() {
	addr, stop := server(codes.Unavailable)
	defer stop()

	// UnaryCall has a default answer; EmptyCall has none, so its
	// rejection stands.
	fallback := func(ctx context.Context, method string, req, reply any, err error) error {
		if r, ok := reply.(*testpb.SimpleResponse); ok {
			r.Username = "guest"
			return nil
		}
		return err
	}
	policy := coordinator.DefaultPolicy()
	policy.MinCalls = 4
	breaker, err := cbgrpc.New(memory.New(), cbgrpc.WithPolicy(policy),
		cbgrpc.WithScope(cbgrpc.ScopeByService), cbgrpc.WithFallback(fallback))
	if err != nil {
		log.Fatal(err)
	}
	defer breaker.Close()
	conn, err := grpc.NewClient(addr,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithUnaryInterceptor(breaker.UnaryClientInterceptor()),
	)
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	client := testgrpc.NewTestServiceClient(conn)
	ctx := context.Background()

	// The server's own failure is not served.
	_, err = client.EmptyCall(ctx, &testpb.Empty{})
	fmt.Println("EmptyCall:", status.Code(err))
	err = untilRejected(func() error {
		_, err := client.EmptyCall(ctx, &testpb.Empty{})
		return err
	})
	fmt.Println("EmptyCall later, rejected:", errors.Is(err, cbgrpc.ErrOpen))
	// The whole service is open: UnaryCall is rejected, and served.
	resp, err := client.UnaryCall(ctx, &testpb.SimpleRequest{})
	fmt.Println("UnaryCall:", resp.GetUsername(), err)
	// Output:
	// EmptyCall: Unavailable
	// EmptyCall later, rejected: true
	// UnaryCall: guest <nil>
}

func ExampleWithFallbackOnFailures() {
	addr, stop := server(codes.Unavailable)
	defer stop()

	breaker, err := cbgrpc.New(memory.New(), cbgrpc.WithFallbackOnFailures(
		func(ctx context.Context, method string, req, reply any, err error) error {
			fmt.Println("serving", method, "after", status.Code(err), "rejected:", errors.Is(err, cbgrpc.ErrOpen))
			return nil // an Empty reply has nothing to fill in
		}))
	if err != nil {
		log.Fatal(err)
	}
	defer breaker.Close()
	conn, err := grpc.NewClient(addr,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithUnaryInterceptor(breaker.UnaryClientInterceptor()),
	)
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()

	_, err = testgrpc.NewTestServiceClient(conn).EmptyCall(context.Background(), &testpb.Empty{})
	fmt.Println("EmptyCall:", err)
	// Output:
	// serving /grpc.testing.TestService/EmptyCall after Unavailable rejected: false
	// EmptyCall: <nil>
}
