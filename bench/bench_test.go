package bench

import (
	"context"
	"os"
	"os/exec"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
)

// requireRedis skips the test without redis-server (and redis-cli),
// except under CI=true, where it fails.
func requireRedis(tb testing.TB) {
	tb.Helper()
	for _, name := range []string{"redis-server", "redis-cli"} {
		if _, err := exec.LookPath(name); err != nil {
			if os.Getenv("CI") == "true" {
				tb.Fatalf("%s is required under CI: %v", name, err)
			}
			tb.Skipf("%s not installed: %v", name, err)
		}
	}
}

// setup starts a private redis-server and the gRPC server; without
// redis-server the test is skipped, except under CI=true, where it fails.
func setup(tb testing.TB) (*Redis, *Server) {
	tb.Helper()
	requireRedis(tb)
	r, err := StartRedis()
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(r.Stop)
	srv, err := StartServer()
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(srv.Stop)
	return r, srv
}

// TestSmoke runs the whole comparison briefly: every configuration builds,
// runs and reports, and the Redis costs are what the design promises
// (one script call per strict admission, almost none with the cache).
func TestSmoke(t *testing.T) {
	r, srv := setup(t)
	rdb := goredis.NewClient(&goredis.Options{Addr: r.Addr})
	defer rdb.Close()
	rows, err := Compare(context.Background(), srv.Addr, Configs(r.Addr),
		Options{Calls: 300, Duration: 200 * time.Millisecond, Concurrent: 4}, rdb)
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != len(Configs(r.Addr)) {
		t.Fatalf("%d rows for %d configurations", len(rows), len(Configs(r.Addr)))
	}
	byName := map[string]Row{}
	for _, row := range rows {
		if row.P50Micros <= 0 || row.RPS1 <= 0 || row.RPSConcurrent <= 0 {
			t.Errorf("%s: incomplete row %+v", row.Name, row)
		}
		byName[row.Name] = row
	}
	strict := byName[CbgrpcRedisStrict(r.Addr).Name]
	if strict.SentPerRPC1 < 1 || strict.SentPerRPC1 > 1.2 {
		t.Errorf("strict: %.3f Redis commands sent per call, want one admission script each (plus a few batched Records)", strict.SentPerRPC1)
	}
	cached := byName[CbgrpcRedisCached(r.Addr).Name]
	if cached.SentPerRPC1 > 0.2 {
		t.Errorf("cached: %.3f Redis commands sent per call, want almost none", cached.SentPerRPC1)
	}
	if strict.Errors+cached.Errors != 0 {
		t.Errorf("calls failed: strict %d, cached %d", strict.Errors, cached.Errors)
	}
}

// BenchmarkUnary runs one unary call per iteration for each configuration;
// compare ns/op and allocs/op with "no breaker".
func BenchmarkUnary(b *testing.B) {
	r, srv := setup(b)
	for _, c := range Configs(r.Addr) {
		b.Run(c.Name, func(b *testing.B) {
			if c.Close != nil {
				defer c.Close()
			}
			opts, err := c.Dial()
			if err != nil {
				b.Fatal(err)
			}
			conn, err := grpc.NewClient(srv.Addr, append(opts, grpc.WithTransportCredentials(insecure.NewCredentials()))...)
			if err != nil {
				b.Fatal(err)
			}
			defer conn.Close()
			client := testgrpc.NewTestServiceClient(conn)
			ctx := context.Background()
			for range 200 {
				client.EmptyCall(ctx, &testgrpc.Empty{})
			}
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				if _, err := client.EmptyCall(ctx, &testgrpc.Empty{}); err != nil && c.Name != Gobreaker(r.Addr).Name {
					b.Fatal(err)
				}
			}
		})
	}
}
