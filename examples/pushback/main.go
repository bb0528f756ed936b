// Command pushback shows server pushback (cbgrpc.WithServerPushback): an
// overloaded server answers Unavailable with gRPC's grpc-retry-pushback-ms
// trailer ("stay away for 1 s"); the first such answer opens the breaker
// for the whole fleet (two replicas here, over the in-process coordinator)
// for exactly that second, as one transition, whatever the number of
// calls that got the answer; then the breaker probes and closes.
//
//	go run ./examples/pushback
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/cbgrpc/cbgrpc"
	"github.com/cbgrpc/cbgrpc/coordinator"
	"github.com/cbgrpc/cbgrpc/coordinator/memory"
)

const (
	overloadFrom  = 500 * time.Millisecond
	overloadUntil = 1200 * time.Millisecond
	runFor        = 3 * time.Second
)

// server pushes back while it is overloaded.
type server struct {
	testgrpc.UnimplementedTestServiceServer
	start  time.Time
	served atomic.Int64
}

func (s *server) EmptyCall(ctx context.Context, _ *testpb.Empty) (*testpb.Empty, error) {
	s.served.Add(1)
	if since := time.Since(s.start); since >= overloadFrom && since < overloadUntil {
		grpc.SetTrailer(ctx, metadata.Pairs("grpc-retry-pushback-ms", "1000"))
		return nil, status.Error(codes.Unavailable, "overloaded")
	}
	return &testpb.Empty{}, nil
}

func main() {
	if err := demo(os.Stdout); err != nil {
		log.Fatal(err)
	}
}

func demo(w io.Writer) error {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	srv := &server{start: time.Now()}
	gs := grpc.NewServer()
	testgrpc.RegisterTestServiceServer(gs, srv)
	go gs.Serve(lis)
	defer gs.Stop()

	var mu sync.Mutex
	line := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintf(w, "%5.2fs  "+format+"\n", append([]any{time.Since(srv.start).Seconds()}, args...)...)
	}
	seen := map[uint64]bool{}
	p := coordinator.DefaultPolicy()
	p.OpenFor, p.MaxOpenFor, p.ProbeSuccesses = 200*time.Millisecond, 5*time.Second, 1
	coord := memory.New()
	line("two replicas, a call every 20ms each; the server pushes back 1s from %v to %v", overloadFrom, overloadUntil)

	ctx, cancel := context.WithTimeout(context.Background(), runFor)
	defer cancel()
	var wg sync.WaitGroup
	for r := 1; r <= 2; r++ {
		b, err := cbgrpc.New(coord, cbgrpc.WithPolicy(p),
			cbgrpc.WithServerPushback([]codes.Code{codes.Unavailable}),
			cbgrpc.WithOnTransition(func(t coordinator.Transition) {
				mu.Lock()
				dup := seen[t.Generation*8+uint64(t.To)]
				seen[t.Generation*8+uint64(t.To)] = true
				mu.Unlock()
				if !dup {
					line("** %v -> %v (%s)", t.From, t.To, t.Reason)
				}
			}))
		if err != nil {
			return err
		}
		defer b.Close()
		cc, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithUnaryInterceptor(b.UnaryClientInterceptor()))
		if err != nil {
			return err
		}
		defer cc.Close()
		client := testgrpc.NewTestServiceClient(cc)
		wg.Add(1)
		go func() {
			defer wg.Done()
			tick := time.NewTicker(20 * time.Millisecond)
			defer tick.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case <-tick.C:
				}
				_, err := client.EmptyCall(context.Background(), &testpb.Empty{})
				var oe *cbgrpc.OpenError
				switch {
				case errors.As(err, &oe):
					line("replica %d: rejected, not sent (%v; retry after %v)", r, oe.State, oe.RetryAfter.Round(10*time.Millisecond))
				case err != nil:
					line("replica %d: %v", r, status.Code(err))
				}
			}
		}()
	}
	wg.Wait()
	line("the server answered %d calls", srv.served.Load())
	return nil
}
