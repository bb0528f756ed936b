package bench

import (
	"context"
	"runtime"
	"testing"

	"github.com/sony/gobreaker/v2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/cbgrpc/cbgrpc"
	"github.com/cbgrpc/cbgrpc/coordinator/memory"
)

// BenchmarkClosedPath is what a breaker costs a call while it is closed,
// in process and with nothing else on the path: cbgrpc's unary
// interceptor over the in-process coordinator, its admissions cached (the
// default), in front of an invoker that does nothing, on a ClientConn (never
// connected) whose target names the scope as a real one does, against sony/gobreaker
// v2's local breaker running a function that does nothing. Each runs on
// one goroutine (serial) and on GOMAXPROCS goroutines (parallel); the
// ratio serial ns/op ÷ parallel ns/op is how the path scales, next to
// that of independent work (a loop of arithmetic, no shared memory), the
// most the machine gives. The serial runs also report cpu-ns/op: the CPU
// time of the benchmark's own thread per call, which a loaded machine
// changes far less than the wall time.
//
//	go test -run '^$' -bench ClosedPath -count 5 .
func BenchmarkClosedPath(b *testing.B) {
	ctx := context.Background()
	b.Run("cbgrpc", func(b *testing.B) {
		br, err := cbgrpc.New(memory.New())
		if err != nil {
			b.Fatal(err)
		}
		defer br.Close()
		cc, err := grpc.NewClient("passthrough:///closed.bench.invalid", grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			b.Fatal(err)
		}
		defer cc.Close()
		call := br.UnaryClientInterceptor()
		invoke := func(context.Context, string, any, any, *grpc.ClientConn, ...grpc.CallOption) error { return nil }
		const method = "/bench.Service/Closed"
		for range 1000 { // past the first admission, into the cache
			if err := call(ctx, method, nil, nil, cc, invoke); err != nil {
				b.Fatal(err)
			}
		}
		paths(b, func() error { return call(ctx, method, nil, nil, cc, invoke) })
	})
	b.Run("gobreaker-local", func(b *testing.B) {
		cb := gobreaker.NewCircuitBreaker[any](gobreaker.Settings{Name: "bench"})
		run := func() (any, error) { return nil, nil }
		paths(b, func() error { _, err := cb.Execute(run); return err })
	})
	b.Run("independent-work", func(b *testing.B) {
		paths(b, func() error {
			x := uint64(88172645463325252)
			for range 64 {
				x ^= x << 13
				x ^= x >> 7
				x ^= x << 17
			}
			if x == 0 {
				b.Fatal("xorshift reached 0")
			}
			return nil
		})
	})
}

// paths runs op serially and in parallel, each a sub-benchmark.
func paths(b *testing.B, op func() error) {
	b.Run("serial", func(b *testing.B) {
		b.ReportAllocs()
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		start := threadCPU()
		for b.Loop() {
			if err := op(); err != nil {
				b.Fatal(err)
			}
		}
		if used := threadCPU() - start; used > 0 {
			b.ReportMetric(float64(used.Nanoseconds())/float64(b.N), "cpu-ns/op")
		}
	})
	b.Run("parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if err := op(); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
}
