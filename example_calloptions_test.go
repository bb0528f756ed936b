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

func ExampleCallScope() {
	addr, stop := server(codes.Unavailable)
	defer stop()
	policy := coordinator.DefaultPolicy()
	policy.MinCalls = 4
	conn, err := grpc.NewClient(addr,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithUnaryInterceptor(cbgrpc.Unary(memory.New(), cbgrpc.WithPolicy(policy))),
	)
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	client := testgrpc.NewTestServiceClient(conn)
	ctx := context.Background()

	// Both methods reach the payments provider behind this service: one
	// breaker for the two.
	payments := cbgrpc.CallScope("payments")
	err = untilRejected(func() error {
		_, err := client.EmptyCall(ctx, &testpb.Empty{}, payments)
		return err
	})
	var oe *cbgrpc.OpenError
	errors.As(err, &oe)
	fmt.Println("EmptyCall rejected in scope", oe.Scope)
	_, err = client.UnaryCall(ctx, &testpb.SimpleRequest{}, payments)
	fmt.Println("UnaryCall rejected:", errors.Is(err, cbgrpc.ErrOpen))

	// An operator's check goes through whatever the breaker says, and is
	// not counted.
	_, err = client.EmptyCall(ctx, &testpb.Empty{}, payments, cbgrpc.Unprotected())
	fmt.Println("unprotected EmptyCall:", status.Code(err), "rejected:", errors.Is(err, cbgrpc.ErrOpen))

	// A bad option fails the call before anything is sent.
	_, err = client.UnaryCall(ctx, &testpb.SimpleRequest{}, cbgrpc.CallScope(""))
	fmt.Println(`CallScope(""):`, status.Code(err))
	// Output:
	// EmptyCall rejected in scope payments
	// UnaryCall rejected: true
	// unprotected EmptyCall: Unavailable rejected: false
	// CallScope(""): InvalidArgument
}

func ExampleCallClassifier() {
	addr, stop := server(codes.NotFound)
	defer stop()
	policy := coordinator.DefaultPolicy()
	policy.MinCalls = 4
	conn, err := grpc.NewClient(addr,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithUnaryInterceptor(cbgrpc.Unary(memory.New(), cbgrpc.WithPolicy(policy))),
	)
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	client := testgrpc.NewTestServiceClient(conn)
	ctx := context.Background()

	// NotFound is an answer: the breaker stays closed.
	for range 8 {
		_, err = client.EmptyCall(ctx, &testpb.Empty{})
	}
	fmt.Println("EmptyCall:", status.Code(err))

	// But for this call, which looks up a record that must exist,
	// NotFound means the dependency lost its data.
	mustExist := cbgrpc.CallClassifier(func(ctx context.Context, method string, err error) cbgrpc.Class {
		if status.Code(err) == codes.NotFound {
			return cbgrpc.Failure
		}
		return cbgrpc.DefaultClassifier(ctx, method, err)
	})
	err = untilRejected(func() error {
		_, err := client.EmptyCall(ctx, &testpb.Empty{}, mustExist)
		return err
	})
	fmt.Println("EmptyCall that must find its record, later:", errors.Is(err, cbgrpc.ErrOpen))
	// Output:
	// EmptyCall: NotFound
	// EmptyCall that must find its record, later: true
}
