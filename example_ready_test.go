package cbgrpc_test

import (
	"context"
	"fmt"
	"log"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/cbgrpc/cbgrpc"
	cbredis "github.com/cbgrpc/cbgrpc/coordinator/redis"
)

// A program checks the coordinator before it serves: here a Redis address
// nothing listens on, which the calls alone would report as timeouts.
func ExampleBreaker_Ready() {
	rdb := goredis.NewClient(&goredis.Options{Addr: "127.0.0.1:1", ContextTimeoutEnabled: true})
	defer rdb.Close()
	b, err := cbgrpc.New(cbredis.New(rdb))
	if err != nil {
		log.Fatal(err)
	}
	defer b.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := b.Ready(ctx); err != nil {
		fmt.Println(err)
	}
	// Output:
	// cbgrpc: Ready: redis coordinator: check: cannot reach Redis at 127.0.0.1:1: dial tcp 127.0.0.1:1: connect: connection refused
}
