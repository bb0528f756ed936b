// Command cbbench compares what a breaker costs a gRPC unary call on
// loopback: no breaker, cbgrpc and its peers, in one run. It prints a
// markdown table and can write it, and a JSON file, for the record.
package main

import (
	"context"
	"flag"
	"io"
	"log"
	"os"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/cbgrpc/cbgrpc/bench"
)

func main() {
	var (
		redisAddr  = flag.String("redis", "", "Redis address; empty starts a private redis-server on a free loopback port")
		calls      = flag.Int("calls", 20000, "sequential calls per configuration (latency, allocations)")
		duration   = flag.Duration("duration", 3*time.Second, "length of each throughput run")
		concurrent = flag.Int("concurrent", 64, "callers in the concurrent throughput run")
		mdPath     = flag.String("md", "", "also write the markdown table here")
		jsonPath   = flag.String("json", "", "write the rows as JSON here")
	)
	flag.Parse()
	if err := run(*redisAddr, bench.Options{Calls: *calls, Duration: *duration, Concurrent: *concurrent}, *mdPath, *jsonPath); err != nil {
		log.Fatal(err)
	}
}

func run(redisAddr string, o bench.Options, mdPath, jsonPath string) error {
	ctx := context.Background()
	if redisAddr == "" {
		r, err := bench.StartRedis()
		if err != nil {
			return err
		}
		defer r.Stop()
		redisAddr = r.Addr
	}
	rdb := goredis.NewClient(&goredis.Options{Addr: redisAddr})
	defer rdb.Close()
	srv, err := bench.StartServer()
	if err != nil {
		return err
	}
	defer srv.Stop()

	rows, err := bench.Compare(ctx, srv.Addr, bench.Configs(redisAddr), o, rdb)
	if err != nil {
		return err
	}
	if err := bench.WriteMarkdown(os.Stdout, rows); err != nil {
		return err
	}
	if mdPath != "" {
		if err := bench.WriteFile(mdPath, func(w io.Writer) error { return bench.WriteMarkdown(w, rows) }); err != nil {
			return err
		}
	}
	if jsonPath != "" {
		if err := bench.WriteFile(jsonPath, func(w io.Writer) error { return bench.WriteJSON(w, rows) }); err != nil {
			return err
		}
	}
	return nil
}
