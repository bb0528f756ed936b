package bench

import (
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

func redisCoordinator(addr string) (func() (coordinator.Coordinator, func()), *commandCounter) {
	counter := &commandCounter{}
	return func() (coordinator.Coordinator, func()) {
		rdb := goredis.NewClient(&goredis.Options{Addr: addr})
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
	c, counter := redisCoordinator(addr)
	return breakerConfig("cbgrpc, Redis, cache (default)", c, counter)
}

// CbgrpcRedisStrict is cbgrpc over Redis asking the coordinator on every
// call: one script call per admission. Its coordinator timeout is raised
// to a second so that, on a loaded machine, slow admissions are measured
// rather than cut short by the fail-open back-off.
func CbgrpcRedisStrict(addr string) Config {
	c, counter := redisCoordinator(addr)
	return breakerConfig("cbgrpc, Redis, strict (no cache)", c, counter,
		cbgrpc.WithAdmissionCache(0), cbgrpc.WithCoordinatorTimeout(time.Second))
}
