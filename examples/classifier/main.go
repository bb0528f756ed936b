// Command classifier shows a custom Classifier: for one method, NotFound
// counts as a failure (say, a lookup whose NotFound means the shard lost its
// data), while for every other method NotFound stays what the default says
// it is: an answer, so a success.
//
//	go run ./examples/classifier
package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net"

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

// lookup is the method whose NotFound is a failure.
const lookup = "/grpc.testing.TestService/UnaryCall"

// notFound answers NotFound to every call.
type notFound struct {
	testgrpc.UnimplementedTestServiceServer
}

func (notFound) EmptyCall(context.Context, *testpb.Empty) (*testpb.Empty, error) {
	return nil, status.Error(codes.NotFound, "no such user")
}

func (notFound) UnaryCall(context.Context, *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
	return nil, status.Error(codes.NotFound, "shard has no data")
}

func classify(ctx context.Context, method string, err error) cbgrpc.Class {
	if method == lookup && status.Code(err) == codes.NotFound {
		return cbgrpc.Failure
	}
	return cbgrpc.DefaultClassifier(ctx, method, err)
}

func main() {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	srv := grpc.NewServer()
	testgrpc.RegisterTestServiceServer(srv, notFound{})
	go srv.Serve(lis)
	defer srv.Stop()

	policy := coordinator.DefaultPolicy()
	policy.MinCalls = 10
	breaker, err := cbgrpc.New(memory.New(), cbgrpc.WithPolicy(policy), cbgrpc.WithClassifier(classify))
	if err != nil {
		log.Fatal(err)
	}
	defer breaker.Close()
	conn, err := grpc.NewClient(lis.Addr().String(),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithUnaryInterceptor(breaker.UnaryClientInterceptor()),
	)
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	client := testgrpc.NewTestServiceClient(conn)
	ctx := context.Background()

	fmt.Println("Both methods answer NotFound to every call; the breaker trips at 50% failures over 10 calls.")
	report := func(name string, call func() error) {
		counts := map[string]int{}
		for range 40 {
			err := call()
			switch {
			case errors.Is(err, cbgrpc.ErrOpen):
				counts["rejected by the breaker"]++
			default:
				counts["answered "+status.Code(err).String()]++
			}
		}
		fmt.Printf("%-10s 40 calls: %v\n", name, counts)
	}
	report("EmptyCall", func() error { _, err := client.EmptyCall(ctx, &testpb.Empty{}); return err })
	report("UnaryCall", func() error { _, err := client.UnaryCall(ctx, &testpb.SimpleRequest{}); return err })
	fmt.Println("EmptyCall's NotFounds are answers (successes); UnaryCall's are failures, so its breaker opened.")
}
