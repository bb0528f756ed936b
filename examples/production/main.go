// Command production is the setup a team would ship, in one process: a
// go-redis client with ContextTimeoutEnabled under the Redis coordinator,
// a Breaker made with [cbgrpc.New] and closed on the way out, a gRPC client
// with explicit transport credentials, otelgrpc's stats handler,
// go-grpc-middleware's retry outside the breaker with [cbgrpc.RetryOn], and
// the OpenTelemetry SDK: a TracerProvider whose transition spans it prints,
// and a MeterProvider whose metrics Prometheus scrapes on /metrics.
//
// A client calls an inventory service every 100 ms; its database goes down
// for a second and a half (-outage), then comes back. The breaker trips,
// rejects calls without sending them, probes and closes again; the example
// then scrapes its own /metrics, prints the breaker's series and shuts
// everything down. Without -redis it starts a redis-server of its own on a
// free loopback port, and stops it at the end.
//
//	go run ./examples/production
//	go run ./examples/production -redis 127.0.0.1:6379 -metrics 127.0.0.1:9464
package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/retry"
	goredis "github.com/redis/go-redis/v9"
	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/status"

	"github.com/cbgrpc/cbgrpc"
	"github.com/cbgrpc/cbgrpc/coordinator"
	cbredis "github.com/cbgrpc/cbgrpc/coordinator/redis"
)

const (
	// scope names the dependency: every replica's calls to it share one
	// breaker in Redis.
	scope = "inventory"
	// prefix starts the breaker's keys in Redis: pointed at a Redis that a
	// fleet already uses, the demonstration's trip must not open that
	// fleet's own inventory breaker. Leave it out in production.
	prefix = "cbgrpc-example-production:"
	// every is how often the client calls.
	every = 100 * time.Millisecond
)

// config is what the flags set.
type config struct {
	redis   string        // address of a Redis; "" starts a redis-server of its own
	metrics string        // address to serve /metrics on
	outage  time.Duration // how long the dependency fails, from the fourth call on; 0: 1.5 s
	timeout time.Duration // the coordinator timeout; 0: cbgrpc.DefaultCoordinatorTimeout
}

func main() {
	var cfg config
	flag.StringVar(&cfg.redis, "redis", "", "address of the Redis the fleet shares (default: start a redis-server on a free loopback port)")
	flag.StringVar(&cfg.metrics, "metrics", "127.0.0.1:9464", "loopback address to serve Prometheus /metrics on")
	flag.DurationVar(&cfg.timeout, "coordinator-timeout", cbgrpc.DefaultCoordinatorTimeout, "how long a call waits for Redis before it decides without it")
	flag.DurationVar(&cfg.outage, "outage", 1500*time.Millisecond, "how long the inventory database is down (long enough for a Prometheus to scrape the open breaker)")
	flag.Parse()
	if cfg.outage <= 0 || cfg.timeout <= 0 {
		log.Fatalf("-outage %v, -coordinator-timeout %v: want both above 0", cfg.outage, cfg.timeout)
	}
	// Ctrl-C shuts everything down as the end of the scenario does,
	// redis-server included; a second one ends the program at once.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	context.AfterFunc(ctx, stop)
	err := run(ctx, os.Stdout, cfg)
	stop()
	switch {
	case errors.Is(err, context.Canceled):
		fmt.Fprintln(os.Stderr, "interrupted")
		os.Exit(130)
	case err != nil:
		log.Fatal(err)
	}
}

// policy trips and recovers within seconds, for the demonstration; start
// from coordinator.DefaultPolicy in production.
func policy() coordinator.Policy {
	p := coordinator.DefaultPolicy()
	p.Window, p.MinCalls, p.ConsecutiveFailures = 5*time.Second, 6, 5
	p.OpenFor, p.MaxOpenFor = 500*time.Millisecond, 2*time.Second
	p.Probes, p.ProbeLease, p.ProbeSuccesses = 1, time.Second, 2
	return p
}

// run plays the scenario against the Redis cfg names, or one it starts,
// and shuts everything down before it returns.
func run(ctx context.Context, w io.Writer, cfg config) (err error) {
	out := &printer{w: w}
	addr := cfg.redis
	if addr == "" {
		srv, err := startRedis()
		if err != nil {
			return err
		}
		defer func() {
			srv.Stop()
			out.printf("Stopped the redis-server on %s.\n", srv.Addr)
		}()
		addr = srv.Addr
		out.printf("No -redis given: started redis-server on %s (pid %d).\n", addr, srv.cmd.Process.Pid)
	}
	rdb := goredis.NewClient(&goredis.Options{Addr: addr, ContextTimeoutEnabled: true})
	defer rdb.Close()

	tel, err := startTelemetry(out, cfg.metrics)
	if err != nil {
		return err
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if e := tel.shutdown(ctx); e != nil && err == nil {
			err = fmt.Errorf("shut down telemetry: %w", e)
		}
	}()
	out.printf("Prometheus metrics on %s\n", tel.url)

	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	srv := grpc.NewServer()
	dep := &inventory{}
	testgrpc.RegisterTestServiceServer(srv, dep)
	go srv.Serve(lis)
	defer srv.Stop()

	b, err := cbgrpc.New(cbredis.New(rdb, cbredis.WithPrefix(prefix)),
		cbgrpc.WithPolicy(policy()),
		cbgrpc.WithScope(func(context.Context, string, string) string { return scope }),
		cbgrpc.WithTracerProvider(tel.tp),
		cbgrpc.WithMeterProvider(tel.mp),
		cbgrpc.WithCoordinatorTimeout(cmp.Or(cfg.timeout, cbgrpc.DefaultCoordinatorTimeout)),
	)
	if err != nil {
		return err
	}
	defer b.Close()
	conn, err := grpc.NewClient(lis.Addr().String(),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithStatsHandler(otelgrpc.NewClientHandler(otelgrpc.WithTracerProvider(tel.tp), otelgrpc.WithMeterProvider(tel.mp))),
		// Retry first, outside the breaker: each attempt is admitted and
		// counted on its own, and RetryOn never retries a rejection.
		grpc.WithChainUnaryInterceptor(
			retry.UnaryClientInterceptor(
				retry.WithMax(3),
				retry.WithBackoff(retry.BackoffLinear(20*time.Millisecond)),
				retry.WithRetriable(cbgrpc.RetryOn(retry.DefaultRetriableCodes...)),
			),
			b.UnaryClientInterceptor(),
		),
	)
	if err != nil {
		return err
	}
	defer conn.Close()
	out.printf("Calling the %s service on %s every %v: retry, then the breaker, then otelgrpc.\n\n", scope, lis.Addr(), every)

	outage := cmp.Or(cfg.outage, 1500*time.Millisecond)
	if err := scenario(ctx, out, testgrpc.NewTestServiceClient(conn), dep, outage, tel.transitions.recovered); err != nil {
		return err
	}
	if err := tel.printScrape(ctx, out); err != nil {
		return err
	}
	out.printf("\nShutting down: the connection, the breaker, the server, telemetry, the Redis client.\n")
	return nil
}

// inventory answers EmptyCall, and Unavailable while its database is down.
type inventory struct {
	testgrpc.UnimplementedTestServiceServer
	down   atomic.Bool
	served atomic.Int64
}

func (d *inventory) EmptyCall(context.Context, *testpb.Empty) (*testpb.Empty, error) {
	d.served.Add(1)
	if d.down.Load() {
		return nil, status.Error(codes.Unavailable, "inventory database unreachable")
	}
	return &testpb.Empty{}, nil
}

// scenario calls the dependency every 100 ms, taking its database down
// for the outage from the fourth call on, until the breaker has tripped
// and recovered.
func scenario(ctx context.Context, out *printer, client testgrpc.TestServiceClient, dep *inventory, outage time.Duration, recovered <-chan struct{}) error {
	tick := time.NewTicker(every)
	defer tick.Stop()
	giveUp := time.After(30*time.Second + outage)
	var upAt time.Time
	for n := 1; ; n++ {
		switch {
		case n == 4:
			dep.down.Store(true)
			upAt = time.Now().Add(outage)
			out.printf("-- the inventory database goes down for %v\n", outage)
		case dep.down.Load() && time.Now().After(upAt):
			dep.down.Store(false)
			out.printf("-- the inventory database is back\n")
		}
		served := dep.served.Load()
		callCtx, cancel := context.WithTimeout(ctx, time.Second)
		_, err := client.EmptyCall(callCtx, &testpb.Empty{})
		cancel()
		out.printf("call %2d  %s\n", n, outcome(err, dep.served.Load()-served))
		select {
		case <-recovered:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		case <-giveUp:
			return fmt.Errorf("the breaker did not trip and recover within 30s of the outage's end")
		case <-tick.C:
		}
	}
}

// outcome says how a call ended, and how many of its attempts reached the
// dependency.
func outcome(err error, reached int64) string {
	var open *cbgrpc.OpenError
	switch {
	case err == nil && reached == 1:
		return "ok"
	case err == nil:
		return fmt.Sprintf("ok after %d attempts", reached)
	case errors.As(err, &open) && reached == 0:
		return fmt.Sprintf("rejected by the breaker, not sent (%s, retry after %v)", open.State, open.RetryAfter.Round(time.Millisecond))
	case errors.As(err, &open) && reached == 1:
		return fmt.Sprintf("1 attempt failed, the next rejected by the breaker (%s)", open.State)
	case errors.As(err, &open):
		return fmt.Sprintf("%d attempts failed, the next rejected by the breaker (%s)", reached, open.State)
	default:
		return fmt.Sprintf("%s after %d attempts: %s", status.Code(err), reached, status.Convert(err).Message())
	}
}
