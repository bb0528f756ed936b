package cbgrpc

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/interop"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"

	goredis "github.com/redis/go-redis/v9"

	"github.com/cbgrpc/cbgrpc/coordinator/memory"
	cbredis "github.com/cbgrpc/cbgrpc/coordinator/redis"
	"github.com/cbgrpc/cbgrpc/internal/redistest"
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
	// Over Redis: the strict path against its floor, a call plus one bare
	// EVALSHA (of a script that returns at once) before it.
	srv := redistest.Start(b)
	b.Run("redis/evalsha", func(b *testing.B) {
		rdb := srv.Client(b)
		bare := goredis.NewScript("return 1")
		run(b, grpc.WithUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			if err := bare.Run(ctx, rdb, nil).Err(); err != nil {
				return err
			}
			return invoker(ctx, method, req, reply, cc, opts...)
		}))
	})
	// A client with ContextTimeoutEnabled honours deadlines, so the Breaker
	// calls Redis from the call's goroutine; with a default client it
	// waits for a goroutine of its own, to keep its timeout.
	for _, honours := range []bool{true, false} {
		name := "redis/strict"
		if !honours {
			name += "/default-client"
		}
		b.Run(name, func(b *testing.B) {
			rdb := goredis.NewClient(&goredis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: honours})
			defer rdb.Close()
			br, err := New(cbredis.New(rdb), WithAdmissionCache(0), WithCoordinatorTimeout(time.Second))
			if err != nil {
				b.Fatal(err)
			}
			defer br.Close()
			run(b, grpc.WithUnaryInterceptor(br.UnaryClientInterceptor()))
		})
	}
}
