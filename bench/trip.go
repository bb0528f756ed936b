package bench

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/cbgrpc/cbgrpc/coordinator"
)

// TripConfig is one run of the trip simulator: what a fleet's breaker
// decides when its dependency goes down, wholly or in part, after a
// healthy spell, and when some of its replicas fail alone. Replicas are
// real Breakers, each with its own go-redis client, replica ID and Redis
// coordinator, calling one scope at a fixed rate through the unary
// interceptor to a stub dependency (with Stream, through the stream
// interceptor to a gRPC server on loopback); with Peers, local breakers of
// other libraries beside each.
type TripConfig struct {
	Replicas int
	Rate     float64            // calls per second of each replica that fails not alone
	Policy   coordinator.Policy // the zero Policy: coordinator.DefaultPolicy
	// Noise is the share of calls that fail at random, throughout: a
	// healthy dependency's errors.
	Noise float64
	// Spell is how long the dependency is healthy (Noise only); Down how
	// long it then fails. Down 0: it stays healthy.
	Spell, Down time.Duration
	// Recover, when set, is how long the dependency is healthy again
	// (Noise only) after Down; Relapse, when set, how long it then fails
	// again as it did while down.
	Recover, Relapse time.Duration
	// Share is the share of calls that fail while down, the noise's
	// among them (a brownout); 0 fails every call. RampUp, when set, is
	// how long the share takes to rise from 0 to Share once down.
	Share  float64
	RampUp time.Duration
	// SlowShare, when set, makes the outage a latency brownout instead:
	// that share of the calls take SlowBy and succeed, and no more calls
	// fail than the noise. Share must then be 0.
	SlowShare float64
	SlowBy    time.Duration
	// DownReplicas, when set, is how many replicas meet the outage (the
	// first that are not bad): a zone down. The others meet only noise.
	DownReplicas int
	// Bad replicas fail every call from the start, the dependency's health
	// whatever (their own sidecar, say, answers Unavailable at once).
	// BadRate is their calls per second; 0 calls in a tight loop, pausing
	// a millisecond after a rejection only. BadRestart, when set, restarts
	// each of them this often: its breaker ends, and a new one with a new
	// replica ID (and go-redis client) takes its place.
	Bad        int
	BadRate    float64
	BadRestart time.Duration
	// Stagger, when set, starts the replicas' calls over this long
	// instead of together; the dependency's clock starts with the first.
	Stagger time.Duration
	// Stall, when set, makes the outage a stall: the calls it would fail,
	// and every call of a bad replica, hang instead, answering nothing
	// until their context ends (Deadline, or the run's). The noise still
	// fails at once.
	Stall bool
	// Deadline, when set, is each call's deadline; 0: none but the run's
	// end.
	Deadline time.Duration
	// Latency, when set, is how long the dependency takes to answer a
	// call (a slow call's SlowBy on top): log-normal, Latency its median
	// and LatencySigma its sigma; sigma 0: every call takes Latency.
	Latency      time.Duration
	LatencySigma float64
	// Stream makes each call a server-streaming call to a gRPC server on
	// loopback (each replica with its own connection), through the
	// breakers' stream interceptors: the server sends one message, or
	// fails before it, or withholds it while the call hangs.
	Stream bool
	// Peers runs, beside each replica's Breaker, local breakers of other
	// libraries at their defaults (localGobreaker, localFailsafe), each
	// calling at the same rate, meeting the same dependency, on its own.
	// They count no slow calls: a latency brownout takes none. Neither
	// has a stream interceptor: with Stream, each judges a stream by its
	// first message (firstMessage).
	Peers bool
}

// TripRow is what a run measured: cbgrpc's Breakers' row, and with
// Peers, one row for each kind of peer.
type TripRow struct {
	Config TripConfig `json:"-"`
	TripBreakerRow
	// Trips are the reasons of the fleet's trips, in order; Outliers the
	// replicas' own transitions to open (outlier verdicts).
	Trips    []string
	Outliers []string
	Peers    []TripBreakerRow `json:",omitempty"`
}

// TripBreakerRow is what one kind of breaker did across the fleet.
type TripBreakerRow struct {
	Breaker string
	// The onset: how the replicas that fail not alone stopped once the
	// dependency went down.
	TripStop
	// HealthyRejected is the calls of those replicas rejected while the
	// dependency was healthy: a trip of the noise, or of the bad replicas.
	HealthyRejected int64
	HealthyCalls    int64
	// SparedRejected is the calls rejected while the dependency was down
	// of the replicas a zone outage spared: calls it would have served.
	SparedRejected int64
	// BadFailures is, per bad replica, its failing (or hung) calls before
	// its first rejection, summed over its starts (-1: never rejected);
	// BadStopped when it first rejected, from its first start (-1:
	// never); BadRejected their rejected calls; BadStarts how many
	// breakers they started.
	BadFailures []int64
	BadStopped  []time.Duration
	BadRejected int64
	BadStarts   int64
	// Recovery is what the breaker did once the dependency recovered,
	// with Recover.
	Recovery TripRecovery `json:",omitzero"`
}

// TripStop is how the replicas that fail not alone stopped calling a
// dependency that went down: the first and the last one's first rejected
// call from when it went down (-1: never), and the failing (or slow, or
// hung) calls the dependency served from then until each replica's first
// rejection, or the outage's end for a replica that never rejected,
// summed. In a stall, Hung is every call let through into it, before the
// replicas stopped and after (their probes): the calls into the hole.
type TripStop struct {
	FirstStopped, LastStopped time.Duration
	Absorbed                  int64
	Hung                      int64 `json:",omitzero"`
}

const tripScope = "/cbtripsim.Dependency/Call"

// validate says which field of cfg is wrong, and why.
func (cfg TripConfig) validate() error {
	bad := func(field, why string, v any) error { return fmt.Errorf("trip: %s %s, have %v", field, why, v) }
	share := func(v float64) bool { return v >= 0 && v <= 1 }
	switch {
	case cfg.Replicas < 1:
		return bad("Replicas", "must be at least 1", cfg.Replicas)
	case cfg.Bad < 0 || cfg.Bad > cfg.Replicas:
		return bad("Bad", "must be from 0 to Replicas", cfg.Bad)
	case cfg.Rate <= 0:
		return bad("Rate", "must be positive", cfg.Rate)
	case cfg.BadRate < 0:
		return bad("BadRate", "must be 0 (a tight loop) or positive", cfg.BadRate)
	case cfg.Spell <= 0:
		return bad("Spell", "must be positive", cfg.Spell)
	case cfg.Down < 0:
		return bad("Down", "must be 0 (never down) or positive", cfg.Down)
	case !share(cfg.Noise):
		return bad("Noise", "must be from 0 to 1", cfg.Noise)
	case !share(cfg.Share):
		return bad("Share", "must be from 0 to 1 (0: every call)", cfg.Share)
	case cfg.RampUp < 0:
		return bad("RampUp", "must be 0 (none) or positive", cfg.RampUp)
	case !share(cfg.SlowShare):
		return bad("SlowShare", "must be from 0 to 1", cfg.SlowShare)
	case (cfg.SlowShare > 0) != (cfg.SlowBy > 0):
		return bad("SlowBy", fmt.Sprintf("must be positive exactly when SlowShare is (%v)", cfg.SlowShare), cfg.SlowBy)
	case cfg.SlowShare > 0 && (cfg.Share > 0 || cfg.RampUp > 0):
		return bad("Share", "and RampUp must be 0 in a latency brownout (SlowShare set)", cfg.Share)
	case cfg.SlowShare > 0 && cfg.Peers:
		return bad("Peers", "must be off in a latency brownout: the peers count no slow calls", cfg.Peers)
	case cfg.DownReplicas < 0 || cfg.DownReplicas > cfg.Replicas-cfg.Bad:
		return bad("DownReplicas", "must be from 0 (all) to the replicas that are not bad", cfg.DownReplicas)
	case cfg.BadRestart < 0:
		return bad("BadRestart", "must be 0 (never) or positive", cfg.BadRestart)
	case cfg.Recover < 0:
		return bad("Recover", "must be 0 (no recovery) or positive", cfg.Recover)
	case cfg.Recover > 0 && cfg.Down == 0:
		return bad("Recover", "must be 0 when Down is: nothing went down to recover from", cfg.Recover)
	case cfg.Relapse < 0:
		return bad("Relapse", "must be 0 (no relapse) or positive", cfg.Relapse)
	case cfg.Relapse > 0 && cfg.Recover == 0:
		return bad("Relapse", "must be 0 unless Recover is set: a relapse follows a recovery", cfg.Relapse)
	case cfg.Stall && cfg.Down == 0 && cfg.Bad == 0:
		return bad("Stall", "must be off when nothing fails (Down 0, no Bad replica)", cfg.Stall)
	case cfg.Stall && cfg.SlowShare > 0:
		return bad("SlowShare", "must be 0 in a stall", cfg.SlowShare)
	case cfg.Stall && cfg.Bad > 0 && cfg.BadRate == 0:
		return bad("BadRate", "must be positive in a stall: a tight loop would wait on each hung call", cfg.BadRate)
	case cfg.Deadline < 0:
		return bad("Deadline", "must be 0 (none) or positive", cfg.Deadline)
	case cfg.Latency < 0:
		return bad("Latency", "must be 0 (none) or positive", cfg.Latency)
	case cfg.LatencySigma < 0 || (cfg.LatencySigma > 0 && cfg.Latency == 0):
		return bad("LatencySigma", "must be 0, or positive with a Latency", cfg.LatencySigma)
	}
	return nil
}

// RunTrip makes one run against target, which must be private to it.
func RunTrip(ctx context.Context, target Target, cfg TripConfig) (TripRow, error) {
	if err := cfg.validate(); err != nil {
		return TripRow{}, err
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
	kinds := []tripBreaker{cbgrpcBreaker(target, cfg.Policy, tell)}
	if cfg.Peers {
		kinds = append(kinds, localGobreaker(), localFailsafe())
	}
	var server *tripServer
	if cfg.Stream {
		var err error
		if server, err = startTripServer(); err != nil {
			return TripRow{}, err
		}
		// At the return, once the loops and their calls have ended.
		defer server.stop()
	}
	dep := newTripDependency(cfg)
	loops := make([][]*tripLoop, len(kinds))
	for k, kind := range kinds {
		for i := range cfg.Replicas {
			loops[k] = append(loops[k], newTripLoop(kind, i, cfg, dep, server))
		}
	}
	// Cancelled, not timed out, at the end: the calls still hanging then
	// are cancelled, which cbgrpc does not count, rather than failed.
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	end := time.AfterFunc(cfg.Spell+cfg.Down+cfg.Recover+cfg.Relapse, stop)
	defer end.Stop()
	var (
		wg    sync.WaitGroup
		errMu sync.Mutex
		errs  []error
	)
	start := time.Now()
	down := func() time.Duration { return time.Since(start) - cfg.Spell }
	for _, kind := range loops {
		for i, l := range kind {
			rate := cfg.Rate
			if l.bad {
				rate = cfg.BadRate
			}
			offset := time.Duration(0)
			if cfg.Stagger > 0 {
				offset = cfg.Stagger * time.Duration(i) / time.Duration(cfg.Replicas)
			}
			wg.Go(func() {
				if err := l.run(runCtx, rate, offset, down); err != nil {
					errMu.Lock()
					errs = append(errs, err)
					errMu.Unlock()
					stop()
				}
			})
		}
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return TripRow{}, err
	}
	row := TripRow{Config: cfg, TripBreakerRow: summarize(kinds[0].name, loops[0], cfg)}
	for k := 1; k < len(kinds); k++ {
		row.Peers = append(row.Peers, summarize(kinds[k].name, loops[k], cfg))
	}
	mu.Lock()
	row.Trips, row.Outliers = slices.Clone(trips), slices.Clone(singles)
	mu.Unlock()
	return row, nil
}
