package bench

import (
	"context"
	"errors"
	"io"
	"sync"

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
	// starting makes it.
	start func(id string) (tripClient, error)
	// rejected says whether err is the breaker's rejection of a call.
	rejected func(error) bool
}

// tripClient is one replica's breaker: its interceptors, and what ends it.
type tripClient struct {
	unary  grpc.UnaryClientInterceptor
	stream grpc.StreamClientInterceptor
	end    func()
}

// cbgrpcBreaker is cbgrpc's Breaker over the Redis coordinator, with a
// go-redis client of its own, telling tell every transition.
func cbgrpcBreaker(target Target, p coordinator.Policy, tell func(coordinator.Transition)) tripBreaker {
	return tripBreaker{
		name: "cbgrpc",
		start: func(id string) (tripClient, error) {
			client := target.client()
			b, err := cbgrpc.New(cbredis.New(client), cbgrpc.WithPolicy(p), cbgrpc.WithOnTransition(tell), cbgrpc.WithReplicaID(id))
			if err != nil {
				client.Close()
				return tripClient{}, err
			}
			return tripClient{unary: b.UnaryClientInterceptor(), stream: b.StreamClientInterceptor(), end: func() { b.Close(); client.Close() }}, nil
		},
		rejected: func(err error) bool { return errors.Is(err, cbgrpc.ErrOpen) },
	}
}

// localGobreaker is sony/gobreaker v2's process-local breaker with zero
// Settings: it trips on more than 5 consecutive failures and stays open
// 60 s. Its two-step form, so that a stream's outcome can come at its
// first message.
func localGobreaker() tripBreaker {
	return tripBreaker{
		name: "gobreaker (local, zero Settings)",
		start: func(id string) (tripClient, error) {
			cb := gobreaker.NewTwoStepCircuitBreaker[any](gobreaker.Settings{})
			unary := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
				done, err := cb.Allow()
				if err != nil {
					return err
				}
				err = invoker(ctx, method, req, reply, cc, opts...)
				done(err)
				return err
			}
			return tripClient{unary: unary, stream: firstMessage(cb.Allow), end: func() {}}, nil
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
		start: func(id string) (tripClient, error) {
			cb := circuitbreaker.NewBuilder[any]().WithFailureRateThreshold(0.5, 100, 0).Build()
			allow := func() (func(error), error) {
				if !cb.TryAcquirePermit() {
					return nil, circuitbreaker.ErrOpen
				}
				return cb.RecordError, nil
			}
			return tripClient{unary: failsafegrpc.NewUnaryClientInterceptor[any](cb), stream: firstMessage(allow), end: func() {}}, nil
		},
		rejected: func(err error) bool { return errors.Is(err, circuitbreaker.ErrOpen) },
	}
}

// firstMessage is the stream interceptor of a local breaker that has none
// (neither peer ships one): allow admits a stream or returns the
// rejection, and done takes its outcome at its first message, or at its
// end if it ends before one. A stream that never answers fails once its
// context ends.
func firstMessage(allow func() (done func(error), err error)) grpc.StreamClientInterceptor {
	return func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		done, err := allow()
		if err != nil {
			return nil, err
		}
		cs, err := streamer(ctx, desc, cc, method, opts...)
		if err != nil {
			done(err)
			return nil, err
		}
		return &firstMessageStream{ClientStream: cs, done: done}, nil
	}
}

type firstMessageStream struct {
	grpc.ClientStream
	once sync.Once
	done func(error)
}

func (s *firstMessageStream) RecvMsg(m any) error {
	err := s.ClientStream.RecvMsg(m)
	s.once.Do(func() {
		outcome := err
		if outcome == io.EOF {
			outcome = nil
		}
		s.done(outcome)
	})
	return err
}
