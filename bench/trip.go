package bench

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"google.golang.org/grpc"

	"github.com/cbgrpc/cbgrpc"
	"github.com/cbgrpc/cbgrpc/coordinator"
	cbredis "github.com/cbgrpc/cbgrpc/coordinator/redis"
)

// TripConfig is one run of the trip simulator: what a fleet's breaker
// decides when its dependency goes down after a healthy spell, and when
// some of its replicas fail alone. Replicas are real Breakers, each with
// its own go-redis client, replica ID and Redis coordinator, calling one
// scope at a fixed rate through the unary interceptor to a stub
// dependency.
type TripConfig struct {
	Replicas int
	Rate     float64            // calls per second of each replica that fails not alone
	Policy   coordinator.Policy // the zero Policy: coordinator.DefaultPolicy
	// Noise is the share of calls that fail at random, throughout: a
	// healthy dependency's errors.
	Noise float64
	// Spell is how long the dependency is healthy (Noise only); Down how
	// long it then fails every call. Down 0: it stays healthy.
	Spell, Down time.Duration
	// Bad replicas fail every call from the start, the dependency's health
	// whatever (their own sidecar, say, answers Unavailable at once).
	// BadRate is their calls per second; 0 calls in a tight loop, pausing
	// a millisecond after a rejection only.
	Bad     int
	BadRate float64
	// Stagger, when set, starts the replicas' calls over this long
	// instead of together; the dependency's clock starts with the first.
	Stagger time.Duration
}

// TripRow is what a run measured. Times count from when the dependency
// went down.
type TripRow struct {
	Config TripConfig `json:"-"`
	// Of the replicas that fail not alone: the first and the last one's
	// first rejected call after the dependency went down (-1: never), and
	// the failing calls the dependency served from then until each
	// replica's first rejection, summed.
	FirstStopped, LastStopped time.Duration
	Absorbed                  int64
	// HealthyRejected is the calls of those replicas rejected while the
	// dependency was healthy: a trip of the noise, or of the bad replicas.
	HealthyRejected int64
	HealthyCalls    int64
	// BadFailures is, per bad replica, its failing calls before its first
	// rejection (-1: never rejected); BadRejected its rejected calls.
	BadFailures []int64
	BadRejected int64
	// Trips are the reasons of the fleet's trips, in order; Outliers the
	// replicas' own transitions to open.
	Trips    []string
	Outliers []string
}

// tripReplica is one replica of a trip run.
type tripReplica struct {
	bad     bool
	client  goredis.UniversalClient
	breaker *cbgrpc.Breaker
	call    grpc.UnaryClientInterceptor
	// Owned by the replica's caller until the run ends: failed counts the
	// failing calls the dependency served, failedSince those since it went
	// down.
	calls, failed, rejected int64
	healthyRejected         int64
	failedSince             int64
	// stopped: the first rejection since the dependency went down (or,
	// for a bad replica, ever); absorbed and failures, the counts then.
	stopped  time.Duration
	absorbed int64
	failures int64
	seen     bool
}

const tripScope = "/cbtripsim.Dependency/Call"

// RunTrip makes one run against target, which must be private to it.
func RunTrip(ctx context.Context, target Target, cfg TripConfig) (TripRow, error) {
	if cfg.Replicas < 1 || cfg.Bad < 0 || cfg.Bad > cfg.Replicas || cfg.Rate <= 0 || cfg.Spell <= 0 || cfg.Down < 0 {
		return TripRow{}, fmt.Errorf("trip: want replicas >= 1, 0 <= bad <= replicas, rate and spell > 0, down >= 0; have %+v", cfg)
	}
	if cfg.Policy == (coordinator.Policy{}) {
		cfg.Policy = coordinator.DefaultPolicy()
	}
	servers := target.servers()
	defer func() {
		for _, s := range servers {
			s.Close()
		}
	}()
	if err := primeScripts(ctx, target, servers); err != nil {
		return TripRow{}, err
	}
	var (
		mu             sync.Mutex
		trips, singles []string
	)
	tell := func(t coordinator.Transition) {
		mu.Lock()
		defer mu.Unlock()
		switch {
		case t.Replica != "" && t.To == coordinator.StateOpen:
			singles = append(singles, t.Replica+": "+t.Reason)
		case t.Replica == "" && t.From == coordinator.StateClosed && t.To == coordinator.StateOpen:
			trips = append(trips, t.Reason)
		}
	}
	var start time.Time
	down := func() time.Duration { return time.Since(start) - cfg.Spell }
	replicas := make([]*tripReplica, cfg.Replicas)
	for i := range replicas {
		r := &tripReplica{bad: i < cfg.Bad, client: target.client(), stopped: -1}
		b, err := cbgrpc.New(cbredis.New(r.client), cbgrpc.WithPolicy(cfg.Policy), cbgrpc.WithOnTransition(tell),
			cbgrpc.WithReplicaID(fmt.Sprintf("replica-%02d", i)))
		if err != nil {
			return TripRow{}, err
		}
		r.breaker, r.call = b, b.UnaryClientInterceptor()
		replicas[i] = r
	}
	defer func() {
		for _, r := range replicas {
			r.breaker.Close()
			r.client.Close()
		}
	}()
	runCtx, stop := context.WithTimeout(ctx, cfg.Spell+cfg.Down)
	defer stop()
	var wg sync.WaitGroup
	start = time.Now()
	for i, r := range replicas {
		rate := cfg.Rate
		if r.bad {
			rate = cfg.BadRate
		}
		offset := time.Duration(0)
		if cfg.Stagger > 0 {
			offset = cfg.Stagger * time.Duration(i) / time.Duration(len(replicas))
		}
		wg.Go(func() { r.run(runCtx, rate, offset, cfg.Noise, down) })
	}
	wg.Wait()
	row := TripRow{Config: cfg, FirstStopped: -1, LastStopped: -1}
	for _, r := range replicas {
		if r.bad {
			n := int64(-1)
			if r.seen {
				n = r.failures
			}
			row.BadFailures = append(row.BadFailures, n)
			row.BadRejected += r.rejected
			continue
		}
		row.HealthyRejected += r.healthyRejected
		row.HealthyCalls += r.calls
		if cfg.Down > 0 && r.stopped >= 0 {
			row.Absorbed += r.absorbed
			if row.FirstStopped < 0 || r.stopped < row.FirstStopped {
				row.FirstStopped = r.stopped
			}
			row.LastStopped = max(row.LastStopped, r.stopped)
		}
	}
	if cfg.Down > 0 && slices.ContainsFunc(replicas, func(r *tripReplica) bool { return !r.bad && r.stopped < 0 }) {
		row.LastStopped = -1
	}
	mu.Lock()
	row.Trips, row.Outliers = slices.Clone(trips), slices.Clone(singles)
	mu.Unlock()
	return row, nil
}

// run calls the scope at rate (0: a tight loop) from offset on until ctx
// ends. The dependency fails a call when the replica is bad, when it is
// down (down() >= 0), or at random with probability noise.
func (r *tripReplica) run(ctx context.Context, rate float64, offset time.Duration, noise float64, down func() time.Duration) {
	select {
	case <-ctx.Done():
		return
	case <-time.After(offset):
	}
	var tick *time.Ticker
	if rate > 0 {
		tick = time.NewTicker(time.Duration(float64(time.Second) / rate))
		defer tick.Stop()
	}
	var failing bool
	invoke := func(context.Context, string, any, any, *grpc.ClientConn, ...grpc.CallOption) error {
		if failing {
			r.failed++
			return errDependency
		}
		return nil
	}
	for {
		since := down()
		failing = r.bad || since >= 0 || rand.Float64() < noise
		r.calls++
		err := r.call(ctx, tripScope, nil, nil, nil, invoke)
		rejected := errors.Is(err, cbgrpc.ErrOpen)
		switch {
		case !rejected:
		case r.bad:
			r.rejected++
			if !r.seen {
				r.seen, r.failures = true, r.failed
			}
		case since < 0:
			r.rejected++
			r.healthyRejected++
		default:
			r.rejected++
			if r.stopped < 0 {
				r.stopped, r.absorbed = since, r.failedSince
			}
		}
		if !rejected && failing && since >= 0 && !r.bad {
			r.failedSince++
		}
		if tick == nil {
			if rejected {
				time.Sleep(time.Millisecond)
			}
			if ctx.Err() != nil {
				return
			}
			continue
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}
