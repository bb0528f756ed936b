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

// Measure runs one configuration against addr. rdb, when non-nil, is the
// Redis server whose command counts are attributed to the configuration.
func Measure(ctx context.Context, addr string, c Config, o Options, rdb *goredis.Client) (Row, error) {
	row := Row{Name: c.Name, Concurrent: o.Concurrent}
	if c.Close != nil {
		defer c.Close()
	}
	opts, err := c.Dial()
	if err != nil {
		return row, fmt.Errorf("%s: %w", c.Name, err)
	}
	opts = append(opts, grpc.WithTransportCredentials(insecure.NewCredentials()))
	conn, err := grpc.NewClient(addr, opts...)
	if err != nil {
		return row, fmt.Errorf("%s: %w", c.Name, err)
	}
	defer conn.Close()
	client := testgrpc.NewTestServiceClient(conn)
	req := &testgrpc.Empty{}
	var errs atomic.Int64
	call := func() {
		if _, err := client.EmptyCall(ctx, req); err != nil {
			errs.Add(1)
		}
	}

	// Warm up the connection, the scripts and the caches.
	for range 200 {
		call()
	}

	commands := func() int64 {
		if rdb == nil {
			return 0
		}
		n, _ := Commands(ctx, rdb)
		return n
	}
	sent := func() int64 {
		if c.Commands == nil {
			return 0
		}
		return c.Commands.n.Load()
	}

	lat := make([]time.Duration, o.Calls)
	var ms0, ms1 runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms0)
	cmd0, sent0 := commands(), sent()
	start := time.Now()
	for i := range lat {
		t := time.Now()
		call()
		lat[i] = time.Since(t)
	}
	elapsed := time.Since(start)
	runtime.ReadMemStats(&ms1)
	cmd1, sent1 := commands(), sent()
	slices.Sort(lat)
	row.P50Micros = micros(lat[len(lat)/2])
	row.P99Micros = micros(lat[len(lat)*99/100])
	row.RPS1 = float64(o.Calls) / elapsed.Seconds()
	row.AllocsPerCall = float64(ms1.Mallocs-ms0.Mallocs) / float64(o.Calls)
	row.RedisPerRPC1 = float64(cmd1-cmd0) / float64(o.Calls)
	row.SentPerRPC1 = float64(sent1-sent0) / float64(o.Calls)

	var calls atomic.Int64
	cmd0, sent0 = commands(), sent()
	stop := time.Now().Add(o.Duration)
	var wg sync.WaitGroup
	start = time.Now()
	for range o.Concurrent {
		wg.Go(func() {
			for time.Now().Before(stop) {
				call()
				calls.Add(1)
			}
		})
	}
	wg.Wait()
	elapsed = time.Since(start)
	cmd1, sent1 = commands(), sent()
	row.RPSConcurrent = float64(calls.Load()) / elapsed.Seconds()
	row.RedisPerRPC = float64(cmd1-cmd0) / float64(calls.Load())
	row.SentPerRPC = float64(sent1-sent0) / float64(calls.Load())
	row.Errors = errs.Load()
	return row, nil
}

func micros(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }

// Compare measures every configuration in turn and fills in the ratios to
// the first one, which should be the call without a breaker.
func Compare(ctx context.Context, addr string, configs []Config, o Options, rdb *goredis.Client) ([]Row, error) {
	rows := make([]Row, 0, len(configs))
	for _, c := range configs {
		r, err := Measure(ctx, addr, c, o, rdb)
		if err != nil {
			return rows, err
		}
		rows = append(rows, r)
	}
	if len(rows) > 0 {
		base := rows[0]
		for i := range rows {
			rows[i].P50Ratio = rows[i].P50Micros / base.P50Micros
			rows[i].AddedAllocs = rows[i].AllocsPerCall - base.AllocsPerCall
		}
	}
	return rows, nil
}
