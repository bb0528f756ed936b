package bench

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/cbgrpc/cbgrpc"
	cbredis "github.com/cbgrpc/cbgrpc/coordinator/redis"
)

// replica is one virtual replica of a service: its own go-redis client,
// Redis coordinator and Breaker, calling every scope through the Breaker's
// unary interceptor at a fixed rate. The dependency is a stub invoker that
// fails as the run's Failure says, with no network in between, so that
// the machine's cores go to the breakers and Redis.
type replica struct {
	id      int
	client  goredis.UniversalClient
	breaker *cbgrpc.Breaker
	call    grpc.UnaryClientInterceptor
	obs     *observer
	// timeout is the Breaker's coordinator timeout: a coordinator call
	// slower than it is counted, for it sends the Breaker into back-off.
	timeout time.Duration
	// latency of the coordinator calls, shared by the fleet.
	latency *latencies

	// methods name the scopes: the calls have no ClientConn, so the
	// default ScopeByMethod makes the method alone the scope.
	methods  []string
	invokers []grpc.UnaryInvoker
	counts   []*scopeCounts
	byScope  map[string]*scopeCounts

	// Coordinator calls by operation, failed ones, and ones slower than
	// timeout; transition feeds lost.
	admits, records, settles atomic.Int64
	errors, slow             atomic.Int64
	feedsLost                atomic.Int64
	// delivered counts the outcomes of Records and Settles that
	// returned without error: Redis has them.
	delivered atomic.Int64
	// firstError is the first coordinator error, to tell what went wrong.
	firstError atomic.Pointer[error]
}

// scopeCounts are one replica's calls of one scope.
type scopeCounts struct {
	calls, rejected, failed atomic.Int64
	// known is the latest generation this replica learned the scope was
	// open in.
	known atomic.Uint64
	// stopped is set at the replica's first rejected call of the scope,
	// and absorbed to the failing calls it had made until then: the
	// calls are sequential, so none is in flight. Owned by run; read once
	// it has returned.
	stopped  bool
	absorbed int64
}

// errDependency is the simulated dependency's failure: Unavailable, which
// the default classifier counts.
var errDependency = status.Error(codes.Unavailable, "cbfleetsim: simulated dependency failure")

// scopeMethod names scope i.
func scopeMethod(i int) string { return fmt.Sprintf("/cbfleetsim.Dependency/Scope%d", i) }

// newReplica makes replica id of fleet f over target, with the Breaker's
// options.
func newReplica(f *fleet, id int, target Target, cfg FleetConfig, opts []cbgrpc.Option) (*replica, error) {
	r := &replica{id: id, client: target.client(), obs: f.obs, timeout: cbgrpc.DefaultCoordinatorTimeout,
		latency: f.latency, byScope: make(map[string]*scopeCounts, cfg.Scopes)}
	r.client.AddHook(f.sent)
	failure, measured := cfg.Failure, f.measured
	for i := range cfg.Scopes {
		c := &scopeCounts{}
		r.methods = append(r.methods, scopeMethod(i))
		r.counts = append(r.counts, c)
		r.byScope[scopeMethod(i)] = c
		r.invokers = append(r.invokers, func(context.Context, string, any, any, *grpc.ClientConn, ...grpc.CallOption) error {
			if failure.fails(time.Since(measured)) {
				c.failed.Add(1)
				return errDependency
			}
			return nil
		})
	}
	// Each its own replica: the coordinator tells replicas apart by ID
	// (Policy.Outliers), and Breakers of one process share a default one.
	opts = append(opts[:len(opts):len(opts)], cbgrpc.WithReplicaID(fmt.Sprintf("replica-%04d", id)))
	b, err := cbgrpc.New(&observed{Coordinator: cbredis.New(r.client), r: r}, opts...)
	if err != nil {
		r.client.Close()
		return nil, err
	}
	r.breaker, r.call = b, b.UnaryClientInterceptor()
	return r, nil
}

// run calls every scope once per period, starting after offset, until ctx
// ends. One ticker per replica, not a goroutine per call: a tick the
// replica cannot keep up with is skipped, and the achieved rate says so.
func (r *replica) run(ctx context.Context, period, offset time.Duration) {
	select {
	case <-ctx.Done():
		return
	case <-time.After(offset):
	}
	tick := time.NewTicker(period)
	defer tick.Stop()
	for {
		for i, m := range r.methods {
			c := r.counts[i]
			c.calls.Add(1)
			if err := r.call(ctx, m, nil, nil, nil, r.invokers[i]); errors.Is(err, cbgrpc.ErrOpen) {
				c.rejected.Add(1)
				if !c.stopped {
					c.stopped, c.absorbed = true, c.failed.Load()
				}
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// learn notes that the replica knows scope is open in generation, if that
// is news.
func (r *replica) learn(scope string, generation uint64, at time.Time) {
	c := r.byScope[scope]
	if c == nil {
		return
	}
	for {
		known := c.known.Load()
		if generation <= known {
			return
		}
		if c.known.CompareAndSwap(known, generation) {
			break
		}
	}
	r.obs.learned(scope, generation, r.id, at)
}

// coordinatorCall counts a coordinator call of the kind n counts, which
// started at start and ended with err.
func (r *replica) coordinatorCall(n *atomic.Int64, start time.Time, err error) {
	n.Add(1)
	if err != nil {
		r.errors.Add(1)
		r.firstError.CompareAndSwap(nil, &err)
	}
	d := time.Since(start)
	r.latency.add(d)
	if d > r.timeout {
		r.slow.Add(1)
	}
}

// close flushes the Breaker and closes the client.
func (r *replica) close() {
	r.breaker.Close()
	r.client.Close()
}
