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
	"io"
	"log"
	"net"
	"os"
	"slices"
	"text/tabwriter"

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
	if err := demo(os.Stdout); err != nil {
		log.Fatal(err)
	}
}

// demo calls each method 40 times through one Breaker and writes what
// became of the calls to w, as a table.
func demo(w io.Writer) error {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	srv := grpc.NewServer()
	testgrpc.RegisterTestServiceServer(srv, notFound{})
	go srv.Serve(lis)
	defer srv.Stop()

	policy := coordinator.DefaultPolicy()
	policy.MinCalls = 10
	breaker, err := cbgrpc.New(memory.New(), cbgrpc.WithPolicy(policy), cbgrpc.WithClassifier(classify))
	if err != nil {
		return err
	}
	defer breaker.Close()
	conn, err := grpc.NewClient(lis.Addr().String(),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithUnaryInterceptor(breaker.UnaryClientInterceptor()),
	)
	if err != nil {
		return err
	}
	defer conn.Close()
	client := testgrpc.NewTestServiceClient(conn)
	ctx := context.Background()

	fmt.Fprintf(w, "Both methods answer NotFound to every call; the breaker trips at 50%% failures over %d calls.\n\n", policy.MinCalls)
	rows := []outcomes{
		count("EmptyCall", func() error { _, err := client.EmptyCall(ctx, &testpb.Empty{}); return err }),
		count("UnaryCall", func() error { _, err := client.UnaryCall(ctx, &testpb.SimpleRequest{}); return err }),
	}
	if err := writeTable(w, rows); err != nil {
		return err
	}
	fmt.Fprintln(w, "\nEmptyCall's NotFounds are answers (successes); UnaryCall's are failures, so its breaker opened.")
	return nil
}

// outcomes is what became of one method's calls: how many the server
// answered with each code, and how many the breaker rejected.
type outcomes struct {
	method   string
	calls    int
	answered map[codes.Code]int
	rejected int
}

func count(method string, call func() error) outcomes {
	o := outcomes{method: method, answered: map[codes.Code]int{}}
	for range 40 {
		o.calls++
		if err := call(); errors.Is(err, cbgrpc.ErrOpen) {
			o.rejected++
		} else {
			o.answered[status.Code(err)]++
		}
	}
	return o
}

// writeTable writes one row per method, with a column per code answered.
func writeTable(w io.Writer, rows []outcomes) error {
	var answered []codes.Code
	for _, r := range rows {
		for c := range r.answered {
			if !slices.Contains(answered, c) {
				answered = append(answered, c)
			}
		}
	}
	slices.Sort(answered)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprint(tw, "method\tcalls\t")
	for _, c := range answered {
		fmt.Fprintf(tw, "answered %v\t", c)
	}
	fmt.Fprint(tw, "rejected by the breaker\n")
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%d\t", r.method, r.calls)
		for _, c := range answered {
			fmt.Fprintf(tw, "%d\t", r.answered[c])
		}
		fmt.Fprintf(tw, "%d\n", r.rejected)
	}
	return tw.Flush()
}
