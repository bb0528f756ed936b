package bench

import (
	"context"
	"errors"
	"time"

	"github.com/failsafe-go/failsafe-go/circuitbreaker"
	"github.com/failsafe-go/failsafe-go/failsafegrpc"
	goredis "github.com/redis/go-redis/v9"
	"github.com/sony/gobreaker/v2"
	"google.golang.org/grpc"
)

// gobreakerStore is the SharedDataStore gobreaker v2's distributed breaker
// needs, on Redis, written the way its documentation suggests: a SET NX
// lock and a GET/SET of the JSON state.
type gobreakerStore struct {
	rdb *goredis.Client
}

var errLocked = errors.New("gobreaker lock is held")

func (s gobreakerStore) Lock(name string) error {
	ok, err := s.rdb.SetNX(context.Background(), name, "1", 5*time.Second).Result()
	if err != nil {
		return err
	}
	if !ok {
		return errLocked
	}
	return nil
}

func (s gobreakerStore) Unlock(name string) error {
	return s.rdb.Del(context.Background(), name).Err()
}

func (s gobreakerStore) GetData(name string) ([]byte, error) {
	b, err := s.rdb.Get(context.Background(), name).Bytes()
	if errors.Is(err, goredis.Nil) {
		return nil, nil
	}
	return b, err
}

func (s gobreakerStore) SetData(name string, data []byte) error {
	return s.rdb.Set(context.Background(), name, data, 0).Err()
}

// Gobreaker is sony/gobreaker v2's distributed breaker over Redis, wrapped
// as a unary client interceptor. Each call runs under its fleet-wide lock.
func Gobreaker(redisAddr string) Config {
	var rdb *goredis.Client
	counter := &commandCounter{}
	return Config{
		Name:     "gobreaker v2 distributed (Redis)",
		Commands: counter,
		Dial: func() ([]grpc.DialOption, error) {
			rdb = goredis.NewClient(&goredis.Options{Addr: redisAddr})
			rdb.AddHook(counter)
			cb, err := gobreaker.NewDistributedCircuitBreaker[any](gobreakerStore{rdb}, gobreaker.Settings{Name: "bench"})
			if err != nil {
				return nil, err
			}
			interceptor := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
				_, err := cb.Execute(func() (any, error) {
					return nil, invoker(ctx, method, req, reply, cc, opts...)
				})
				return err
			}
			return []grpc.DialOption{grpc.WithUnaryInterceptor(interceptor)}, nil
		},
		Close: func() {
			if rdb != nil {
				rdb.Close()
			}
		},
	}
}

// Failsafe is failsafe-go's gRPC client interceptor with a default,
// process-local circuit breaker.
func Failsafe() Config {
	return Config{
		Name: "failsafe-go (local)",
		Dial: func() ([]grpc.DialOption, error) {
			cb := circuitbreaker.NewWithDefaults[any]()
			return []grpc.DialOption{grpc.WithUnaryInterceptor(failsafegrpc.NewUnaryClientInterceptor[any](cb))}, nil
		},
	}
}

// None is the call without a breaker, the baseline of every ratio.
func None() Config {
	return Config{
		Name: "no breaker",
		Dial: func() ([]grpc.DialOption, error) { return nil, nil },
	}
}
