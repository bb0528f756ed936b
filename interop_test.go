package cbgrpc

import (
	"context"
	"log"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/interop"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/status"

	"github.com/cbgrpc/cbgrpc/coordinator/memory"
)

// TestInterop runs grpc-go's own interop client against its test server,
// without and with the breaker on the client: every case must behave the
// same. The interop cases fail the process on any difference.
func TestInterop(t *testing.T) {
	addr := serve(t, func(s *grpc.Server) { testgrpc.RegisterTestServiceServer(s, interop.NewTestServer()) })
	cases := []struct {
		name string
		run  func(context.Context, testgrpc.TestServiceClient)
	}{
		{"empty_unary", func(ctx context.Context, c testgrpc.TestServiceClient) { interop.DoEmptyUnaryCall(ctx, c) }},
		{"large_unary", func(ctx context.Context, c testgrpc.TestServiceClient) { interop.DoLargeUnaryCall(ctx, c) }},
		{"client_streaming", func(ctx context.Context, c testgrpc.TestServiceClient) { interop.DoClientStreaming(ctx, c) }},
		{"server_streaming", func(ctx context.Context, c testgrpc.TestServiceClient) { interop.DoServerStreaming(ctx, c) }},
		{"ping_pong", func(ctx context.Context, c testgrpc.TestServiceClient) { interop.DoPingPong(ctx, c) }},
		{"empty_stream", func(ctx context.Context, c testgrpc.TestServiceClient) { interop.DoEmptyStream(ctx, c) }},
		{"timeout_on_sleeping_server", func(ctx context.Context, c testgrpc.TestServiceClient) { interop.DoTimeoutOnSleepingServer(ctx, c) }},
		{"cancel_after_begin", cancelAfterBegin},
		{"cancel_after_first_response", func(ctx context.Context, c testgrpc.TestServiceClient) { interop.DoCancelAfterFirstResponse(ctx, c) }},
		{"custom_metadata", func(ctx context.Context, c testgrpc.TestServiceClient) { interop.DoCustomMetadata(ctx, c) }},
		{"status_code_and_message", func(ctx context.Context, c testgrpc.TestServiceClient) { interop.DoStatusCodeAndMessage(ctx, c) }},
		{"special_status_message", func(ctx context.Context, c testgrpc.TestServiceClient) { interop.DoSpecialStatusMessage(ctx, c) }},
	}
	for _, withBreaker := range []bool{false, true} {
		name := "plain"
		opts := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
		var tc *testCoordinator
		if withBreaker {
			name = "breaker"
			tc = newTestCoordinator(t, memory.New())
			b := newBreaker(t, tc)
			opts = append(opts, grpc.WithUnaryInterceptor(b.UnaryClientInterceptor()), grpc.WithStreamInterceptor(b.StreamClientInterceptor()))
		}
		cc, err := grpc.NewClient(addr, opts...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cc.Close() })
		client := testgrpc.NewTestServiceClient(cc)
		for _, c := range cases {
			t.Run(name+"/"+c.name, func(t *testing.T) {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				c.run(ctx, client)
			})
		}
		if tc != nil && tc.admits.Load() < int64(len(cases)) {
			t.Errorf("the breaker admitted %d calls, fewer than the %d cases: was it installed?", tc.admits.Load(), len(cases))
		}
	}
}

// cancelAfterBegin is interop.DoCancelAfterBegin with a wait, between the
// cancel and CloseAndRecv, for gRPC to end the stream. gRPC ends a
// canceled stream in a goroutine of its own: on a loaded machine the
// half-close could reach the server first, and its answer then be read as
// the stream's end (seen once, with and without a breaker alike).
func cancelAfterBegin(ctx context.Context, c testgrpc.TestServiceClient) {
	ctx, cancel := context.WithCancel(ctx)
	ended := make(chan struct{})
	stream, err := c.StreamingInputCall(ctx, grpc.OnFinish(func(error) { close(ended) }))
	if err != nil {
		log.Fatalf("StreamingInputCall: %v", err)
	}
	cancel()
	select {
	case <-ended:
	case <-time.After(10 * time.Second):
		log.Fatal("the stream did not end within 10 s of its cancel")
	}
	if _, err := stream.CloseAndRecv(); status.Code(err) != codes.Canceled {
		log.Fatalf("CloseAndRecv after cancel: %v, want code %v", err, codes.Canceled)
	}
}
