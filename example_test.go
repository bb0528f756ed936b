package cbgrpc_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net"
	"strings"
	"time"

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

// failing is a TestService whose EmptyCall always fails with code, and
// whose UnaryCall succeeds.
type failing struct {
	testgrpc.UnimplementedTestServiceServer
	code codes.Code
}

func (s failing) EmptyCall(context.Context, *testpb.Empty) (*testpb.Empty, error) {
	return nil, status.Error(s.code, "told to fail")
}

func (failing) UnaryCall(context.Context, *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
	return &testpb.SimpleResponse{}, nil
}

// server starts a TestService on a loopback port; stop it when done.
func server(code codes.Code) (addr string, stop func()) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	s := grpc.NewServer()
	testgrpc.RegisterTestServiceServer(s, failing{code: code})
	go s.Serve(lis)
	return lis.Addr().String(), s.Stop
}

// untilRejected calls f until the breaker rejects a call (outcomes are
// recorded in the background, so the trip lands a moment after the
// failures).
func untilRejected(f func() error) error {
	for {
		if err := f(); errors.Is(err, cbgrpc.ErrOpen) {
			return err
		}
	}
}

func ExampleUnary() {
	addr, stop := server(codes.Unavailable)
	defer stop()

	// One process: the in-process coordinator. A fleet shares a Redis
	// one: redis.New(goredis.NewClient(...)).
	coord := memory.New()
	policy := coordinator.DefaultPolicy()
	policy.MinCalls = 4 // trip quickly, for the example

	conn, err := grpc.NewClient(addr,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithUnaryInterceptor(cbgrpc.Unary(coord, cbgrpc.WithPolicy(policy))),
	)
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	client := testgrpc.NewTestServiceClient(conn)

	_, err = client.EmptyCall(context.Background(), &testpb.Empty{})
	fmt.Println("first call:", status.Code(err))

	err = untilRejected(func() error {
		_, err := client.EmptyCall(context.Background(), &testpb.Empty{})
		return err
	})
	fmt.Println("later: rejected without being sent:", errors.Is(err, cbgrpc.ErrOpen))
	fmt.Println("its status code:", status.Code(err))
	// Output:
	// first call: Unavailable
	// later: rejected without being sent: true
	// its status code: Unavailable
}

func ExampleWithClassifier() {
	addr, stop := server(codes.NotFound)
	defer stop()

	// For EmptyCall, NotFound means the dependency lost its data: count
	// it as a failure there, and classify everything else as usual.
	classify := func(ctx context.Context, method string, err error) cbgrpc.Class {
		if method == "/grpc.testing.TestService/EmptyCall" && status.Code(err) == codes.NotFound {
			return cbgrpc.Failure
		}
		return cbgrpc.DefaultClassifier(ctx, method, err)
	}
	policy := coordinator.DefaultPolicy()
	policy.MinCalls = 4

	breaker, err := cbgrpc.New(memory.New(), cbgrpc.WithClassifier(classify), cbgrpc.WithPolicy(policy))
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

	err = untilRejected(func() error {
		_, err := client.EmptyCall(context.Background(), &testpb.Empty{})
		return err
	})
	fmt.Println("EmptyCall after NotFounds:", strings.Contains(err.Error(), "circuit breaker open"))
	// Each method has its own breaker by default: UnaryCall still runs.
	_, err = client.UnaryCall(context.Background(), &testpb.SimpleRequest{})
	fmt.Println("UnaryCall:", status.Code(err))
	// Output:
	// EmptyCall after NotFounds: true
	// UnaryCall: OK
}

func ExampleWithScope() {
	ctx := context.Background()
	target := "dns:///users.internal:443"

	// The provided scope functions.
	fmt.Println(cbgrpc.ScopeByMethod(ctx, target, "/users.v1.Users/Get"))
	fmt.Println(cbgrpc.ScopeByService(ctx, target, "/users.v1.Users/Get"))
	fmt.Println(cbgrpc.ScopeByTarget(ctx, target, "/users.v1.Users/Get"))

	// A scope function of your own: one breaker per service, named without
	// the target, so that every address of the dependency shares it; and
	// the admin service left unprotected (an empty scope).
	byService := func(ctx context.Context, target, method string) string {
		if strings.HasPrefix(method, "/users.v1.Admin/") {
			return ""
		}
		return "users:" + cbgrpc.ScopeByService(ctx, "", method)
	}
	fmt.Printf("%q\n", byService(ctx, target, "/users.v1.Users/Get"))
	fmt.Printf("%q\n", byService(ctx, target, "/users.v1.Admin/Purge"))

	breaker, err := cbgrpc.New(memory.New(),
		cbgrpc.WithScope(byService),
		// Methods can also be left out without a scope function.
		cbgrpc.WithExcludedMethods("/users.v1.Users/Ping"),
	)
	if err != nil {
		log.Fatal(err)
	}
	defer breaker.Close()
	// Output:
	// dns:///users.internal:443/users.v1.Users/Get
	// dns:///users.internal:443/users.v1.Users
	// dns:///users.internal:443
	// "users:/users.v1.Users"
	// ""
}

func ExampleWithOnTransition() {
	addr, stop := server(codes.Unavailable)
	defer stop()

	// The callback runs off the calls' path, in a goroutine of the
	// Breaker's: here it hands each transition to the code that acts on it
	// (a log line, an alert).
	transitions := make(chan coordinator.Transition, 16)
	policy := coordinator.DefaultPolicy()
	policy.MinCalls = 4
	breaker, err := cbgrpc.New(memory.New(), cbgrpc.WithPolicy(policy),
		cbgrpc.WithOnTransition(func(t coordinator.Transition) { transitions <- t }))
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

	untilRejected(func() error {
		_, err := client.EmptyCall(context.Background(), &testpb.Empty{})
		return err
	})
	t := <-transitions
	fmt.Println("EmptyCall:", t.From, "->", t.To)

	// An operator's command through the Breaker is a transition too.
	note := coordinator.Note{By: "alice", Reason: "INC-42: payments migration"}
	if _, err := breaker.Isolate(context.Background(), "payments", note); err != nil {
		log.Fatal(err)
	}
	t = <-transitions
	fmt.Println(t.Scope+":", t.From, "->", t.To)
	// Output:
	// EmptyCall: closed -> open
	// payments: closed -> isolated
}

func ExampleBreaker_Policy() {
	addr, stop := server(codes.Unavailable)
	defer stop()
	coord := memory.New()
	// Without the admission cache every call asks the coordinator, whose
	// answer tells of a changed override: this example needs no feed.
	breaker, err := cbgrpc.New(coord, cbgrpc.WithPolicy(coordinator.DefaultPolicy()), cbgrpc.WithAdmissionCache(0))
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
	client.UnaryCall(context.Background(), &testpb.SimpleRequest{})
	scope := cbgrpc.ScopeByMethod(context.Background(), addr, "/grpc.testing.TestService/UnaryCall")

	// An operator lays an override over the code's policy, for one scope,
	// without a redeploy (cbctl policy set does the same).
	o, err := coordinator.ParseOverride("failure_ratio=0.3", "open_for=30s")
	if err != nil {
		log.Fatal(err)
	}
	note := coordinator.Note{By: "alice", Reason: "INC-1241: card processor flapping"}
	if _, err := coord.SetOverride(context.Background(), coordinator.ScopeTarget(scope), o, note); err != nil {
		log.Fatal(err)
	}
	// The Breaker applies it within a second: the next answer about the
	// scope tells it (with the cache on, the feed tells it at once).
	for deadline := time.Now().Add(time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		client.UnaryCall(context.Background(), &testpb.SimpleRequest{})
		if _, src := breaker.Policy(scope); src == coordinator.SourceScope {
			break
		}
	}
	p, src := breaker.Policy(scope)
	fmt.Println(src, p.FailureRatio, p.OpenFor)

	// A field that would not make a valid policy is refused, naming it.
	_, err = coord.SetOverride(context.Background(), coordinator.ScopeTarget(scope), coordinator.Override{"FailureRatio": "1.5"}, note)
	var pe *coordinator.PolicyError
	fmt.Println(errors.As(err, &pe), pe.Field)
	// Output:
	// scope override 0.3 30s
	// true FailureRatio
}
