// Command ramp shows the recovery ramp (coordinator.Policy.RampFor): four
// replicas share one breaker over the in-process coordinator; the server
// fails for a second; when the breaker closes again, the fleet does not
// send its full traffic at once but ramps it up over two seconds. Every
// 100 ms the timeline prints the share of calls the replicas admitted and
// why the others were rejected.
//
//	go run ./examples/ramp
//	go run ./examples/ramp -redis 127.0.0.1:6379   # four replicas sharing a Redis
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/status"

	"github.com/cbgrpc/cbgrpc"
	"github.com/cbgrpc/cbgrpc/coordinator"
	"github.com/cbgrpc/cbgrpc/coordinator/memory"
	cbredis "github.com/cbgrpc/cbgrpc/coordinator/redis"
)

const (
	replicas  = 4
	interval  = 5 * time.Millisecond // between one replica's calls
	failFrom  = 500 * time.Millisecond
	failUntil = 1500 * time.Millisecond
	runFor    = 5 * time.Second
)

type server struct {
	testgrpc.UnimplementedTestServiceServer
	start time.Time
}

func (s *server) EmptyCall(context.Context, *testpb.Empty) (*testpb.Empty, error) {
	if since := time.Since(s.start); since >= failFrom && since < failUntil {
		return nil, status.Error(codes.Unavailable, "warming up")
	}
	return &testpb.Empty{}, nil
}

// tally counts one 100 ms slot of the timeline.
type tally struct {
	calls, admitted, ramp, open atomic.Int64
}

func main() {
	redisAddr := flag.String("redis", "", "Redis address: each replica its own client, under a prefix of this run, deleted at the end (default: the in-process coordinator)")
	flag.Parse()
	coordinatorOf := func() coordinator.Coordinator { return memoryCoord }
	if *redisAddr != "" {
		prefix := fmt.Sprintf("cbgrpc-example-ramp-%d:", time.Now().UnixNano())
		var clients []*goredis.Client
		coordinatorOf = func() coordinator.Coordinator {
			rdb := goredis.NewClient(&goredis.Options{Addr: *redisAddr, ContextTimeoutEnabled: true})
			clients = append(clients, rdb)
			return cbredis.New(rdb, cbredis.WithPrefix(prefix))
		}
		defer func() {
			ctx := context.Background()
			for _, rdb := range clients {
				if keys, err := rdb.Keys(ctx, prefix+"*").Result(); err == nil && len(keys) > 0 {
					rdb.Del(ctx, keys...)
				}
				rdb.Close()
			}
		}()
	}
	if err := demo(os.Stdout, coordinatorOf); err != nil {
		log.Print(err)
		return
	}
}

// memoryCoord is the coordinator the replicas share without Redis.
var memoryCoord = memory.New()

// demo runs the fleet for runFor, each replica over coordinatorOf(), and
// writes the timeline to w.
func demo(w io.Writer, coordinatorOf func() coordinator.Coordinator) error {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	srv := &server{start: time.Now()}
	gs := grpc.NewServer()
	testgrpc.RegisterTestServiceServer(gs, srv)
	go gs.Serve(lis)
	defer gs.Stop()

	p := coordinator.DefaultPolicy()
	p.MinCalls, p.OpenFor, p.MaxOpenFor, p.ProbeSuccesses = 20, 300*time.Millisecond, 0, 1
	p.RampFor = 2 * time.Second
	var mu sync.Mutex
	var events []string
	seen := map[string]bool{} // every replica hears every transition: print it once
	onTransition := cbgrpc.WithOnTransition(func(t coordinator.Transition) {
		mu.Lock()
		defer mu.Unlock()
		key := fmt.Sprint(t.Generation, t.To)
		if seen[key] {
			return
		}
		seen[key] = true
		events = append(events, fmt.Sprintf("%5.2fs  ** %v -> %v (%s)", time.Since(srv.start).Seconds(), t.From, t.To, t.Reason))
	})

	slots := make([]tally, runFor/(100*time.Millisecond))
	ctx, cancel := context.WithTimeout(context.Background(), runFor)
	defer cancel()
	var wg sync.WaitGroup
	for range replicas {
		b, err := cbgrpc.New(coordinatorOf(), cbgrpc.WithPolicy(p), onTransition)
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
			tick := time.NewTicker(interval)
			defer tick.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case <-tick.C:
				}
				i := int(time.Since(srv.start) / (100 * time.Millisecond))
				if i >= len(slots) {
					return
				}
				_, err := client.EmptyCall(context.Background(), &testpb.Empty{})
				slots[i].calls.Add(1)
				var oe *cbgrpc.OpenError
				switch {
				case errors.As(err, &oe) && strings.Contains(oe.Reason, "ramping"):
					slots[i].ramp.Add(1)
				case errors.As(err, &oe):
					slots[i].open.Add(1)
				default:
					slots[i].admitted.Add(1)
				}
			}
		}()
	}
	wg.Wait()

	fmt.Fprintf(w, "%d replicas, a call every %v each; the server fails from %v to %v; RampFor %v.\n\n",
		replicas, interval, failFrom, failUntil, p.RampFor)
	fmt.Fprintln(w, " time   calls  admitted  ramp-rejected  open-rejected")
	mu.Lock()
	defer mu.Unlock()
	next := 0
	for i := range slots {
		at := float64(i) / 10
		for next < len(events) && parseAt(events[next]) < at+0.1 {
			fmt.Fprintln(w, events[next])
			next++
		}
		s := &slots[i]
		calls := s.calls.Load()
		share := 0.0
		if calls > 0 {
			share = 100 * float64(s.admitted.Load()) / float64(calls)
		}
		fmt.Fprintf(w, "%5.1fs  %5d  %7.0f%%  %13d  %13d\n", at, calls, share, s.ramp.Load(), s.open.Load())
	}
	return nil
}

// parseAt reads the time an event line starts with.
func parseAt(line string) float64 {
	var at float64
	fmt.Sscanf(strings.TrimSpace(line), "%fs", &at)
	return at
}
