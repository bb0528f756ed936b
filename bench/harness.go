package bench

import (
	"context"
	"fmt"
	"net"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/interop"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
)

// Server is an in-process gRPC server on loopback that serves grpc-go's
// interop TestService; EmptyCall is the cheapest real unary call it ships.
// (Not the health service: the breaker leaves health checks out.)
type Server struct {
	Addr string
	srv  *grpc.Server
}

// StartServer serves the TestService on a free loopback port.
func StartServer() (*Server, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	srv := grpc.NewServer()
	testgrpc.RegisterTestServiceServer(srv, interop.NewTestServer())
	go srv.Serve(l)
	return &Server{Addr: l.Addr().String(), srv: srv}, nil
}

// Stop stops the server.
func (s *Server) Stop() { s.srv.Stop() }

// Config is one way of calling the server: a name and the dial options
// that install the breaker, with what to release afterwards.
type Config struct {
	Name string
	// Dial returns the dial options for one client connection.
	Dial func() ([]grpc.DialOption, error)
	// Close releases what Dial made; may be nil.
	Close func()
	// Commands counts the Redis commands the configuration's clients
	// send; nil when it sends none.
	Commands *commandCounter
}

// Options says how long each measurement runs.
type Options struct {
	Calls      int           // sequential calls for latency and allocations
	Duration   time.Duration // length of each throughput run
	Concurrent int           // callers in the concurrent throughput run
}

// Row is what one configuration measured.
type Row struct {
	Name          string  `json:"name"`
	P50Micros     float64 `json:"p50_us"`
	P99Micros     float64 `json:"p99_us"`
	P50Ratio      float64 `json:"p50_ratio_to_none"`
	RPS1          float64 `json:"rps_1_caller"`
	RPSConcurrent float64 `json:"rps_concurrent"`
	Concurrent    int     `json:"concurrent_callers"`
	RedisPerRPC1  float64 `json:"redis_server_commands_per_rpc_1_caller"`
	RedisPerRPC   float64 `json:"redis_server_commands_per_rpc_concurrent"`
	SentPerRPC1   float64 `json:"redis_client_commands_per_rpc_1_caller"`
	SentPerRPC    float64 `json:"redis_client_commands_per_rpc_concurrent"`
	AllocsPerCall float64 `json:"allocs_per_call"`
	AddedAllocs   float64 `json:"allocs_added_per_call"`
	Errors        int64   `json:"errors"`
}

// Rounds is how many interleaved rounds the latency measurement takes:
// each round runs Calls/Rounds sequential calls of every configuration in
// turn, so that a machine that slows down or speeds up during the run
// weighs on every configuration alike.
const Rounds = 10

// run is one configuration, dialled, during a comparison.
type run struct {
	c      Config
	conn   *grpc.ClientConn
	client testgrpc.TestServiceClient
	errs   atomic.Int64
	lat    []time.Duration
	allocs uint64
	sent   int64 // commands the client sent during the latency rounds
	server int64 // commands Redis ran during this configuration's rounds
	took   time.Duration
}

func (r *run) call(ctx context.Context) {
	if _, err := r.client.EmptyCall(ctx, &testgrpc.Empty{}); err != nil {
		r.errs.Add(1)
	}
}

func (r *run) sentCommands() int64 {
	if r.c.Commands == nil {
		return 0
	}
	return r.c.Commands.n.Load()
}

// Compare measures every configuration against addr and fills in the
// ratios to the first one, which should be the call without a breaker.
// rdb, when non-nil, is the Redis server whose command counts are
// attributed to the configuration being measured.
func Compare(ctx context.Context, addr string, configs []Config, o Options, rdb *goredis.Client) ([]Row, error) {
	serverCommands := func() int64 {
		if rdb == nil {
			return 0
		}
		n, _ := Commands(ctx, rdb)
		return n
	}
	runs := make([]*run, 0, len(configs))
	defer func() {
		for _, r := range runs {
			r.conn.Close()
			if r.c.Close != nil {
				r.c.Close()
			}
		}
	}()
	for _, c := range configs {
		opts, err := c.Dial()
		if err != nil {
			if c.Close != nil {
				c.Close()
			}
			return nil, fmt.Errorf("%s: %w", c.Name, err)
		}
		opts = append(opts, grpc.WithTransportCredentials(insecure.NewCredentials()))
		conn, err := grpc.NewClient(addr, opts...)
		if err != nil {
			if c.Close != nil {
				c.Close()
			}
			return nil, fmt.Errorf("%s: %w", c.Name, err)
		}
		r := &run{c: c, conn: conn, client: testgrpc.NewTestServiceClient(conn)}
		runs = append(runs, r)
		// Warm up the connection, the scripts and the caches.
		for range 200 {
			r.call(ctx)
		}
	}

	per := max(1, o.Calls/Rounds)
	for range Rounds {
		for _, r := range runs {
			var ms0, ms1 runtime.MemStats
			runtime.ReadMemStats(&ms0)
			sent0, server0 := r.sentCommands(), serverCommands()
			start := time.Now()
			for range per {
				t := time.Now()
				r.call(ctx)
				r.lat = append(r.lat, time.Since(t))
			}
			r.took += time.Since(start)
			runtime.ReadMemStats(&ms1)
			r.allocs += ms1.Mallocs - ms0.Mallocs
			r.sent += r.sentCommands() - sent0
			r.server += serverCommands() - server0
		}
	}

	rows := make([]Row, 0, len(runs))
	for _, r := range runs {
		row := Row{Name: r.c.Name, Concurrent: o.Concurrent}
		n := len(r.lat)
		slices.Sort(r.lat)
		row.P50Micros = micros(r.lat[n/2])
		row.P99Micros = micros(r.lat[n*99/100])
		row.RPS1 = float64(n) / r.took.Seconds()
		row.AllocsPerCall = float64(r.allocs) / float64(n)
		row.SentPerRPC1 = float64(r.sent) / float64(n)
		row.RedisPerRPC1 = float64(r.server) / float64(n)

		var calls atomic.Int64
		sent0, server0 := r.sentCommands(), serverCommands()
		stop := time.Now().Add(o.Duration)
		var wg sync.WaitGroup
		start := time.Now()
		for range o.Concurrent {
			wg.Go(func() {
				for time.Now().Before(stop) {
					r.call(ctx)
					calls.Add(1)
				}
			})
		}
		wg.Wait()
		elapsed := time.Since(start)
		row.RPSConcurrent = float64(calls.Load()) / elapsed.Seconds()
		row.SentPerRPC = float64(r.sentCommands()-sent0) / float64(calls.Load())
		row.RedisPerRPC = float64(serverCommands()-server0) / float64(calls.Load())
		row.Errors = r.errs.Load()
		rows = append(rows, row)
	}
	base := rows[0]
	for i := range rows {
		rows[i].P50Ratio = rows[i].P50Micros / base.P50Micros
		rows[i].AddedAllocs = rows[i].AllocsPerCall - base.AllocsPerCall
	}
	return rows, nil
}

func micros(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }
