package bench

import (
	"context"
	"time"

	"google.golang.org/grpc"

	goredis "github.com/redis/go-redis/v9"

	"github.com/cbgrpc/cbgrpc"
	"github.com/cbgrpc/cbgrpc/coordinator"
	"github.com/cbgrpc/cbgrpc/coordinator/memory"
	cbredis "github.com/cbgrpc/cbgrpc/coordinator/redis"
)

// breakerConfig is cbgrpc over the coordinator that newCoordinator makes,
// with extra options.
func breakerConfig(name string, newCoordinator func() (coordinator.Coordinator, func()), counter *commandCounter, opts ...cbgrpc.Option) Config {
	var b *cbgrpc.Breaker
	var release func()
	return Config{
		Name:     name,
		Commands: counter,
		Dial: func() ([]grpc.DialOption, error) {
			var c coordinator.Coordinator
			c, release = newCoordinator()
			var err error
			if b, err = cbgrpc.New(c, opts...); err != nil {
				return nil, err
			}
			return []grpc.DialOption{grpc.WithUnaryInterceptor(b.UnaryClientInterceptor())}, nil
		},
		Close: func() {
			if b != nil {
				b.Close()
			}
			if release != nil {
				release()
			}
		},
	}
}

func memoryCoordinator() (coordinator.Coordinator, func()) {
	return memory.New(), nil
}

// redisCoordinator makes Redis coordinators over clients of their own,
// set as the README advises: ContextTimeoutEnabled, so that the Breaker
// calls Redis from the call's goroutine (coordinator.Bounded); with
// defaultClient, a go-redis client as it comes, which it must wait for in
// a goroutine of its own.
func redisCoordinator(addr string, defaultClient bool) (func() (coordinator.Coordinator, func()), *commandCounter) {
	counter := &commandCounter{}
	return func() (coordinator.Coordinator, func()) {
		rdb := goredis.NewClient(&goredis.Options{Addr: addr, ContextTimeoutEnabled: !defaultClient})
		rdb.AddHook(counter)
		return cbredis.New(rdb), func() { rdb.Close() }
	}, counter
}

// CbgrpcMemory is cbgrpc over the in-process coordinator, with its
// admission cache (the default).
func CbgrpcMemory() Config {
	return breakerConfig("cbgrpc, memory", memoryCoordinator, nil)
}

// CbgrpcRedisCached is cbgrpc over Redis with the admission cache fed by
// the transition feed: the default.
func CbgrpcRedisCached(addr string) Config {
	c, counter := redisCoordinator(addr, false)
	return breakerConfig("cbgrpc, Redis, cache (default)", c, counter)
}

// CbgrpcRedisStrict is cbgrpc over Redis asking the coordinator on every
// call: one script call per admission. Its coordinator timeout is raised
// to a second so that, on a loaded machine, slow admissions are measured
// rather than cut short by the fail-open back-off.
func CbgrpcRedisStrict(addr string) Config {
	c, counter := redisCoordinator(addr, false)
	return breakerConfig("cbgrpc, Redis, strict (no cache)", c, counter,
		cbgrpc.WithAdmissionCache(0), cbgrpc.WithCoordinatorTimeout(time.Second))
}

// CbgrpcRedisStrictDefaultClient is CbgrpcRedisStrict over a go-redis
// client as it comes, without ContextTimeoutEnabled.
func CbgrpcRedisStrictDefaultClient(addr string) Config {
	c, counter := redisCoordinator(addr, true)
	return breakerConfig("cbgrpc, Redis, strict, default client", c, counter,
		cbgrpc.WithAdmissionCache(0), cbgrpc.WithCoordinatorTimeout(time.Second))
}

// BareEvalsha is no breaker, but one EVALSHA of a script that returns at
// once before every call: the floor of any breaker that asks Redis on
// every call, to hold the strict path against.
func BareEvalsha(addr string) Config {
	counter := &commandCounter{}
	var rdb *goredis.Client
	bare := goredis.NewScript("return 1")
	return Config{
		Name:     "no breaker + bare EVALSHA",
		Commands: counter,
		Dial: func() ([]grpc.DialOption, error) {
			rdb = goredis.NewClient(&goredis.Options{Addr: addr, ContextTimeoutEnabled: true})
			rdb.AddHook(counter)
			return []grpc.DialOption{grpc.WithUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
				if err := bare.Run(ctx, rdb, nil).Err(); err != nil {
					return err
				}
				return invoker(ctx, method, req, reply, cc, opts...)
			})}, nil
		},
		Close: func() {
			if rdb != nil {
				rdb.Close()
			}
		},
	}
}
