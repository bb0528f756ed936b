package bench

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"

	"github.com/cbgrpc/cbgrpc"
	"github.com/cbgrpc/cbgrpc/coordinator"
	cbredis "github.com/cbgrpc/cbgrpc/coordinator/redis"
)

// ThrottleConfig is one run of the adaptive-throttling simulation: Replicas
// virtual replicas, each a Breaker over its own Redis coordinator, call
// one dependency Rate times a second each for Duration. From OverloadAt to
// RecoverAt the dependency serves only Capacity of the load offered
// (first come, first served, in slots of a tenth of a second), failing the
// rest with Unavailable; before and after it serves everything.
type ThrottleConfig struct {
	Replicas   int
	Rate       float64
	Duration   time.Duration
	OverloadAt time.Duration
	RecoverAt  time.Duration
	Capacity   float64
	// Policy is every Breaker's. With PerReplica, its Throttle is taken
	// out of the Breakers and applied by each replica on its own counts.
	Policy     coordinator.Policy
	PerReplica bool
	// Poisson spaces each replica's calls at random (exponential gaps of
	// mean 1/Rate), as independent users would, instead of at a fixed
	// phase of the dependency's slots: with a fixed phase a replica whose
	// calls come late in every slot fails every call of the overload.
	Poisson bool
}

// ThrottleSecond is what one second of a run saw, fleet-wide: calls
// offered, admitted (they reached the dependency) and accepted (served),
// and of the calls not admitted, those an open or half-open breaker
// rejected (Tripped) rather than the throttle.
type ThrottleSecond struct {
	Offered, Admitted, Accepted, Tripped int64
}

// ThrottleRun is the seconds of a run, in order.
type ThrottleRun struct {
	Config  ThrottleConfig
	Seconds []ThrottleSecond
}

// slot is the dependency's capacity period.
const slot = 100 * time.Millisecond

// RunThrottle runs the simulation against target, a fresh Redis.
func RunThrottle(ctx context.Context, target Target, cfg ThrottleConfig) (ThrottleRun, error) {
	if cfg.Replicas < 1 || cfg.Rate <= 0 || cfg.Duration <= 0 || cfg.Capacity <= 0 || cfg.Capacity > 1 {
		return ThrottleRun{}, fmt.Errorf("throttle: want replicas, rate, duration > 0 and capacity in (0, 1], have %+v", cfg)
	}
	if err := cfg.Policy.Validate(); err != nil {
		return ThrottleRun{}, err
	}
	secs := int(cfg.Duration / time.Second)
	run := ThrottleRun{Config: cfg, Seconds: make([]ThrottleSecond, secs)}
	var offered, admitted, accepted, tripped = make([]atomic.Int64, secs), make([]atomic.Int64, secs), make([]atomic.Int64, secs), make([]atomic.Int64, secs)
	start := time.Now()
	second := func() int { return min(int(time.Since(start)/time.Second), secs-1) }
	// A slot serves its share of the capacity, the fractions carried over:
	// 6.4 calls a slot is 6, 6, 7, 6, 7...
	perSlot := cfg.Capacity * cfg.Rate * float64(cfg.Replicas) * slot.Seconds()
	budget := func(k int64) int64 { return int64(perSlot*float64(k+1)) - int64(perSlot*float64(k)) }
	var slots sync.Map // slot index -> *atomic.Int64 of calls served
	dependency := func(context.Context, string, any, any, *grpc.ClientConn, ...grpc.CallOption) error {
		at := time.Since(start)
		admitted[second()].Add(1)
		if at >= cfg.OverloadAt && at < cfg.RecoverAt {
			k := int64(at / slot)
			n, _ := slots.LoadOrStore(k, &atomic.Int64{})
			if n.(*atomic.Int64).Add(1) > budget(k) {
				return errDependency
			}
		}
		accepted[second()].Add(1)
		return nil
	}

	policy := cfg.Policy
	if cfg.PerReplica {
		policy.Throttle = 0
	}
	ctx, stop := context.WithTimeout(ctx, cfg.Duration)
	defer stop()
	var wg sync.WaitGroup
	var closers []func()
	defer func() {
		for _, c := range closers {
			c()
		}
	}()
	period := time.Duration(float64(time.Second) / cfg.Rate)
	for range cfg.Replicas {
		client := target.client()
		b, err := cbgrpc.New(cbredis.New(client), cbgrpc.WithPolicy(policy))
		if err != nil {
			client.Close()
			return ThrottleRun{}, err
		}
		closers = append(closers, func() { b.Close(); client.Close() })
		call := b.UnaryClientInterceptor()
		if cfg.PerReplica {
			call = chain(NewLocalThrottle(cfg.Policy).Interceptor(), call)
		}
		wg.Go(func() {
			offset := rand.N(period)
			sleep(ctx, offset)
			tick := time.NewTicker(period)
			defer tick.Stop()
			next := func() {
				select {
				case <-ctx.Done():
				case <-tick.C:
				}
			}
			if cfg.Poisson {
				next = func() { sleep(ctx, time.Duration(rand.ExpFloat64()*float64(period))) }
			}
			for ctx.Err() == nil {
				offered[second()].Add(1)
				err := call(ctx, "/cbfleetsim.Dependency/Throttled", nil, nil, nil, dependency)
				if oe, ok := errors.AsType[*cbgrpc.OpenError](err); ok && oe.State != coordinator.StateClosed {
					tripped[second()].Add(1)
				}
				next()
			}
		})
	}
	wg.Wait()
	for i := range run.Seconds {
		run.Seconds[i] = ThrottleSecond{Offered: offered[i].Load(), Admitted: admitted[i].Load(), Accepted: accepted[i].Load(), Tripped: tripped[i].Load()}
	}
	return run, nil
}

// chain runs outer around inner.
func chain(outer, inner grpc.UnaryClientInterceptor) grpc.UnaryClientInterceptor {
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		return outer(ctx, method, req, reply, cc, func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, opts ...grpc.CallOption) error {
			return inner(ctx, method, req, reply, cc, invoker, opts...)
		}, opts...)
	}
}

// LocalThrottle is adaptive throttling as go-zero and kratos do it, for
// comparison: one replica's own counts, over a sliding window of the
// policy's length and buckets, and the formula cbgrpc applies to the
// fleet's (Policy.Throttle), with the same floor of MinCalls calls.
type LocalThrottle struct {
	p     coordinator.Policy
	width time.Duration

	mu      sync.Mutex
	buckets []localBucket
}

type localBucket struct {
	idx                        int64
	calls, failures, throttled int
}

// NewLocalThrottle returns a per-replica throttle with p's K, window and
// buckets.
func NewLocalThrottle(p coordinator.Policy) *LocalThrottle {
	return &LocalThrottle{p: p, width: p.BucketWidth(), buckets: make([]localBucket, p.Buckets)}
}

var errLocallyThrottled = errors.New("throttled by this replica")

// Interceptor rejects calls by the replica's own counts and counts how
// each call ended: a failure is an error other than a rejection.
func (l *LocalThrottle) Interceptor() grpc.UnaryClientInterceptor {
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		if rand.Float64() < l.share(time.Now()) {
			l.add(time.Now(), func(b *localBucket) { b.throttled++ })
			return errLocallyThrottled
		}
		err := invoker(ctx, method, req, reply, cc, opts...)
		if errors.Is(err, cbgrpc.ErrOpen) {
			return err
		}
		l.add(time.Now(), func(b *localBucket) {
			b.calls++
			if err != nil {
				b.failures++
			}
		})
		return err
	}
}

func (l *LocalThrottle) bucket(now time.Time) *localBucket {
	idx := now.UnixNano() / int64(l.width)
	b := &l.buckets[idx%int64(len(l.buckets))]
	if b.idx != idx {
		*b = localBucket{idx: idx}
	}
	return b
}

func (l *LocalThrottle) add(now time.Time, f func(*localBucket)) {
	l.mu.Lock()
	f(l.bucket(now))
	l.mu.Unlock()
}

func (l *LocalThrottle) share(now time.Time) float64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	idx := now.UnixNano() / int64(l.width)
	calls, failures, throttled := 0, 0, 0
	for _, b := range l.buckets {
		if b.idx > idx-int64(len(l.buckets)) && b.idx <= idx {
			calls, failures, throttled = calls+b.calls, failures+b.failures, throttled+b.throttled
		}
	}
	if calls < max(l.p.MinCalls, l.p.ConsecutiveFailures, 1) {
		return 0
	}
	requests, accepts := float64(calls+throttled), float64(calls-failures)
	return max(0, (requests-l.p.Throttle*accepts)/(requests+1))
}
