package bench

import (
	"context"
	"errors"

	"github.com/failsafe-go/failsafe-go/circuitbreaker"
	"github.com/failsafe-go/failsafe-go/failsafegrpc"
	"github.com/sony/gobreaker/v2"
	"google.golang.org/grpc"

	"github.com/cbgrpc/cbgrpc"
	"github.com/cbgrpc/cbgrpc/coordinator"
	cbredis "github.com/cbgrpc/cbgrpc/coordinator/redis"
)

// tripBreaker is one kind of breaker a trip run gives every replica.
type tripBreaker struct {
	name string
	// start makes the breaker of the replica called id, as a process
	// starting makes it: its interceptor, and what ends it.
	start func(id string) (grpc.UnaryClientInterceptor, func(), error)
	// rejected says whether err is the breaker's rejection of a call.
	rejected func(error) bool
}

// cbgrpcBreaker is cbgrpc's Breaker over the Redis coordinator, with a
// go-redis client of its own, telling tell every transition.
func cbgrpcBreaker(target Target, p coordinator.Policy, tell func(coordinator.Transition)) tripBreaker {
	return tripBreaker{
		name: "cbgrpc",
		start: func(id string) (grpc.UnaryClientInterceptor, func(), error) {
			client := target.client()
			b, err := cbgrpc.New(cbredis.New(client), cbgrpc.WithPolicy(p), cbgrpc.WithOnTransition(tell), cbgrpc.WithReplicaID(id))
			if err != nil {
				client.Close()
				return nil, nil, err
			}
			return b.UnaryClientInterceptor(), func() { b.Close(); client.Close() }, nil
		},
		rejected: func(err error) bool { return errors.Is(err, cbgrpc.ErrOpen) },
	}
}

// localGobreaker is sony/gobreaker v2's process-local breaker with zero
// Settings: it trips on more than 5 consecutive failures and stays open
// 60 s.
func localGobreaker() tripBreaker {
	return tripBreaker{
		name: "gobreaker (local, zero Settings)",
		start: func(id string) (grpc.UnaryClientInterceptor, func(), error) {
			cb := gobreaker.NewCircuitBreaker[any](gobreaker.Settings{})
			call := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
				_, err := cb.Execute(func() (any, error) {
					return nil, invoker(ctx, method, req, reply, cc, opts...)
				})
				return err
			}
			return call, func() {}, nil
		},
		rejected: func(err error) bool {
			return errors.Is(err, gobreaker.ErrOpenState) || errors.Is(err, gobreaker.ErrTooManyRequests)
		},
	}
}

// localFailsafe is failsafe-go's process-local breaker set up as
// resilience4j's default rule: it trips when half the last 100 calls
// failed, once it has seen 100. A zero period makes failsafe-go count
// calls rather than time.
func localFailsafe() tripBreaker {
	return tripBreaker{
		name: "failsafe-go (local, 50% of 100 calls)",
		start: func(id string) (grpc.UnaryClientInterceptor, func(), error) {
			cb := circuitbreaker.NewBuilder[any]().WithFailureRateThreshold(0.5, 100, 0).Build()
			return failsafegrpc.NewUnaryClientInterceptor[any](cb), func() {}, nil
		},
		rejected: func(err error) bool { return errors.Is(err, circuitbreaker.ErrOpen) },
	}
}
