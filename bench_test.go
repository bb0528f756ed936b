package cbgrpc

import (
	"context"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/interop"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"

	"github.com/cbgrpc/cbgrpc/coordinator/memory"
)

// BenchmarkUnary measures what the breaker adds to a loopback unary call:
// compare ns/op and allocs/op of the sub-benchmarks. The cached run admits
// from the admission cache after the first call; the strict run asks the
// in-process coordinator on every call.
func BenchmarkUnary(b *testing.B) {
	addr := serve(b, func(s *grpc.Server) { testgrpc.RegisterTestServiceServer(s, interop.NewTestServer()) })
	run := func(b *testing.B, opts ...grpc.DialOption) {
		conn, err := grpc.NewClient(addr, append(opts, grpc.WithTransportCredentials(insecure.NewCredentials()))...)
		if err != nil {
			b.Fatal(err)
		}
		defer conn.Close()
		client := testgrpc.NewTestServiceClient(conn)
		ctx := context.Background()
		for range 100 {
			if _, err := client.EmptyCall(ctx, &testgrpc.Empty{}); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportAllocs()
		b.ResetTimer()
		for b.Loop() {
			if _, err := client.EmptyCall(ctx, &testgrpc.Empty{}); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.Run("none", func(b *testing.B) { run(b) })
	b.Run("cached", func(b *testing.B) {
		br, err := New(memory.New())
		if err != nil {
			b.Fatal(err)
		}
		defer br.Close()
		run(b, grpc.WithUnaryInterceptor(br.UnaryClientInterceptor()))
	})
	b.Run("strict", func(b *testing.B) {
		br, err := New(memory.New(), WithAdmissionCache(0))
		if err != nil {
			b.Fatal(err)
		}
		defer br.Close()
		run(b, grpc.WithUnaryInterceptor(br.UnaryClientInterceptor()))
	})
}
