// Command fleet shows why the breaker is shared. Several replicas of a
// service (goroutines here, each with its own Breaker, replica ID,
// connection and, with -redis, its own Redis client) call one dependency
// that answers for a healthy spell, then fails every call. It runs twice:
// once with one breaker shared by the whole fleet through one coordinator,
// once with a breaker per replica, and prints how many failing calls the
// dependency absorbed before every replica stopped calling it.
//
//	go run ./examples/fleet                       # one shared in-process coordinator
//	go run ./examples/fleet -redis 127.0.0.1:6379 # the fleet shares a Redis
//	go run ./examples/fleet -sentinel 127.0.0.1:26379 -master mymaster # found through Sentinel
//
// With Redis, each run keeps its breakers under a prefix of its own
// ("cbgrpc-fleet-<time>:"), and deletes every key under it when it ends,
// also on Ctrl-C (a second Ctrl-C ends it at once, leaving the keys).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"net"
	"os"
	"os/signal"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
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

var (
	redisAddr = flag.String("redis", "", "address of a Redis the replicas share (default: one in-process coordinator)")
	sentinels = flag.String("sentinel", "", "comma-separated Sentinel addresses, instead of -redis: the replicas share the master they monitor")
	master    = flag.String("master", "", "with -sentinel: the name of the master the Sentinels monitor")
	replicas  = flag.Int("replicas", 8, "number of replicas")
	every     = flag.Duration("every", 20*time.Millisecond, "time between one replica's calls")
	healthy   = flag.Duration("healthy", 3*time.Second, "how long the dependency answers before it fails every call")
)

// dependency answers until it is down, then fails every call and counts
// those that reached it.
type dependency struct {
	testgrpc.UnimplementedTestServiceServer
	down     atomic.Bool
	absorbed atomic.Int64
}

func (d *dependency) EmptyCall(context.Context, *testpb.Empty) (*testpb.Empty, error) {
	if !d.down.Load() {
		return &testpb.Empty{}, nil
	}
	d.absorbed.Add(1)
	return nil, status.Error(codes.Unavailable, "overloaded")
}

func main() {
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	// A second Ctrl-C ends the program at once.
	context.AfterFunc(ctx, stop)
	err := demo(ctx)
	stop()
	switch {
	case errors.Is(err, context.Canceled):
		fmt.Fprintln(os.Stderr, "interrupted")
		os.Exit(130)
	case err != nil:
		log.Fatal(err)
	}
}

func demo(ctx context.Context) error {
	// The default policy: trip on a run of 20 failures, judged without the
	// replica that contributes most, or at 50% failures over at least 20
	// calls in the window. Stay open longer than the run, so no probe
	// blurs the count.
	policy := coordinator.DefaultPolicy()
	policy.OpenFor = time.Minute
	policy.MaxOpenFor = 0

	fmt.Printf("%d replicas, one call every %v each, against a dependency that answers for %v, then fails every call.\n", *replicas, *every, *healthy)
	fmt.Printf("Policy: trip on a run of %d failures, or at %.0f%% failures over at least %d calls in %v.\n\n",
		policy.ConsecutiveFailures, policy.FailureRatio*100, policy.MinCalls, policy.Window)

	var shared func(i int) coordinator.Coordinator
	what := "one in-process coordinator"
	if newClient, where := redisClient(); newClient != nil {
		what = "Redis " + where
		admin := newClient()
		defer admin.Close()
		if err := admin.Ping(ctx).Err(); err != nil {
			return fmt.Errorf("redis %s: %w", where, err)
		}
		// A prefix per run keeps runs apart; the open breakers' keys
		// outlive the run, so it deletes them (after the replicas' last
		// writes: run closes every Breaker before it returns).
		prefix := fmt.Sprintf("cbgrpc-fleet-%d:", time.Now().UnixNano())
		defer func() {
			n, err := deleteKeys(admin, prefix)
			if err != nil {
				log.Printf("deleting the keys under %q from redis %s: %v", prefix, where, err)
				return
			}
			fmt.Printf("Deleted the %d keys under %q from Redis %s.\n", n, prefix, where)
		}()
		var clients []*goredis.Client
		defer func() {
			for _, c := range clients {
				c.Close()
			}
		}()
		shared = func(int) coordinator.Coordinator {
			// Its own client per replica, as separate processes would have.
			rdb := newClient()
			clients = append(clients, rdb)
			return cbredis.New(rdb, cbredis.WithPrefix(prefix))
		}
	} else {
		m := memory.New()
		shared = func(int) coordinator.Coordinator { return m }
	}
	one, err := run(ctx, "Shared breaker ("+what+")", policy, shared)
	if err != nil {
		return err
	}
	each, err := run(ctx, "A breaker per replica", policy, func(int) coordinator.Coordinator { return memory.New() })
	if err != nil {
		return err
	}
	fmt.Printf("The dependency absorbed %d failing calls with the shared breaker and %d with a breaker per replica (%.1fx).\n",
		one, each, float64(each)/float64(max(one, 1)))
	return nil
}

// deleteKeys deletes every key under prefix and says how many there were.
// It has a context of its own: the run's is cancelled on Ctrl-C.
func deleteKeys(rdb *goredis.Client, prefix string) (int64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var deleted int64
	var batch []string
	flush := func() error {
		n, err := rdb.Unlink(ctx, batch...).Result()
		deleted += n
		batch = batch[:0]
		return err
	}
	// The prefix holds no glob character: "cbgrpc-fleet-<digits>:".
	iter := rdb.Scan(ctx, 0, prefix+"*", 1000).Iterator()
	for iter.Next(ctx) {
		if batch = append(batch, iter.Val()); len(batch) == 1000 {
			if err := flush(); err != nil {
				return deleted, err
			}
		}
	}
	if err := iter.Err(); err != nil {
		return deleted, err
	}
	if len(batch) > 0 {
		return deleted, flush()
	}
	return deleted, nil
}

// redisClient returns how to make a client of the Redis the flags name, and
// where it is; nil when they name none.
func redisClient() (func() *goredis.Client, string) {
	switch {
	case *sentinels != "" && *redisAddr != "":
		log.Fatal("-redis and -sentinel: give one of them")
	case *sentinels != "" && *master == "":
		log.Fatal("-sentinel needs -master, the name of the master the Sentinels monitor")
	case *sentinels == "" && *master != "":
		log.Fatal("-master goes with -sentinel")
	case *sentinels != "":
		return func() *goredis.Client {
			return goredis.NewFailoverClient(&goredis.FailoverOptions{MasterName: *master, SentinelAddrs: strings.Split(*sentinels, ","), ContextTimeoutEnabled: true})
		}, fmt.Sprintf("master %q found through Sentinel %s", *master, *sentinels)
	case *redisAddr != "":
		return func() *goredis.Client {
			return goredis.NewClient(&goredis.Options{Addr: *redisAddr, ContextTimeoutEnabled: true})
		}, "at " + *redisAddr
	}
	return nil, ""
}

// run starts the replicas with a coordinator each from coord, lets them
// call through the healthy spell and then until every one of them has been
// stopped by its breaker (or ctx is done), and returns how many failing
// calls reached the dependency.
func run(ctx context.Context, title string, policy coordinator.Policy, coord func(i int) coordinator.Coordinator) (int64, error) {
	fmt.Println(title)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	srv := grpc.NewServer()
	dep := &dependency{}
	testgrpc.RegisterTestServiceServer(srv, dep)
	go srv.Serve(lis)
	defer srv.Stop()

	start := time.Now()
	time.AfterFunc(*healthy, func() { dep.down.Store(true) })
	var wg sync.WaitGroup
	stopped := make([]time.Duration, *replicas)
	sent := make([]int, *replicas)
	// Every Breaker is closed, its outcomes recorded, before run returns.
	defer wg.Wait()
	for i := range *replicas {
		breaker, err := cbgrpc.New(coord(i), cbgrpc.WithPolicy(policy), cbgrpc.WithReplicaID(fmt.Sprintf("replica-%d", i)))
		if err != nil {
			return 0, err
		}
		conn, err := grpc.NewClient(lis.Addr().String(),
			grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithUnaryInterceptor(breaker.UnaryClientInterceptor()),
		)
		if err != nil {
			breaker.Close()
			return 0, err
		}
		client := testgrpc.NewTestServiceClient(conn)
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer breaker.Close()
			defer conn.Close()
			// Replicas start a little apart, as real ones do.
			pause := time.Duration(i) * *every / time.Duration(*replicas)
			for time.Since(start) < *healthy+30*time.Second {
				select {
				case <-ctx.Done():
					return
				case <-time.After(pause):
				}
				down := dep.down.Load()
				_, err := client.EmptyCall(ctx, &testpb.Empty{})
				if errors.Is(err, cbgrpc.ErrOpen) {
					stopped[i] = time.Since(start) - *healthy
					return
				}
				if down {
					sent[i]++
				}
				pause = *every
			}
		}()
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	for i := range *replicas {
		fmt.Printf("  replica %d: %3d failing calls reached the dependency, stopped by its breaker %v after it went down\n", i, sent[i], stopped[i].Round(time.Millisecond))
	}
	fmt.Printf("  => %d failing calls absorbed\n\n", dep.absorbed.Load())
	return dep.absorbed.Load(), nil
}
