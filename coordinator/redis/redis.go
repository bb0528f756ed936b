package redis

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/cbgrpc/cbgrpc/coordinator"
	"github.com/cbgrpc/cbgrpc/coordinator/implement"
)

// DefaultPrefix starts every key the coordinator writes, unless
// [WithPrefix] says otherwise.
const DefaultPrefix = "cbgrpc:"

const (
	// gcMargin is how long closed state outlives its window in real time.
	// Decisions compare timestamps, so any margin is correct; a second
	// keeps an idle scope's keys briefly after they stop mattering.
	gcMargin = time.Second
	// testClockGCMargin replaces gcMargin under an injected clock: the
	// scripts then run on the test's time while Redis expires keys on its
	// own, and a test whose clock stands still must not see its state
	// vanish under it.
	testClockGCMargin = 10 * time.Minute
)

// DefaultReplicaTimeout bounds how long an operator's command waits for
// replicas, unless [WithReplicaTimeout] says otherwise. A replica in sync
// acknowledges within milliseconds and WAIT returns as soon as it has, so
// the bound costs time only when a replica is behind or gone: the
// operator then hears so within a second, well inside the 10 s that cbctl
// and a Breaker give a command.
const DefaultReplicaTimeout = time.Second

// Coordinator is a [coordinator.Coordinator] on Redis. It holds no state of
// its own: every method is one script call (which the operator's commands
// follow with a wait for the replicas). Create one with [New]; it is
// safe for concurrent use.
type Coordinator struct {
	client  goredis.UniversalClient
	prefix  string
	clock   func() time.Time
	cluster bool                   // a Redis Cluster: a Watch subscribes on each node that owns a followed scope
	learned atomic.Pointer[server] // what learn found

	replicas       int // 0: as many as the master reports
	replicaTimeout time.Duration
	heartbeat      time.Duration // a Watch's heartbeat period; silence after 3 of them is a lost feed
	sharedCap      int           // followers a shared heartbeat channel keeps at most (sharedheartbeat.go)

	foreign atomic.Uint64 // messages its Watches ignored (IgnoredMessages)
}

var _ coordinator.Coordinator = (*Coordinator)(nil)

// Option configures a [Coordinator].
type Option interface{ apply(*Coordinator) }

type optionFunc func(*Coordinator)

func (f optionFunc) apply(c *Coordinator) { f(c) }

// WithPrefix starts every key with prefix instead of [DefaultPrefix], to
// keep several deployments apart in one Redis. The prefix must not contain
// '{' or '}': the coordinator places its own hash tag after it.
func WithPrefix(prefix string) Option {
	return optionFunc(func(c *Coordinator) { c.prefix = prefix })
}

// WithClock makes the scripts use the time clock returns instead of the
// Redis server's TIME; nil is ignored. It is for tests that drive a breaker
// through its states without sleeping: replicas in production must share
// the server's clock.
func WithClock(clock func() time.Time) Option {
	return optionFunc(func(c *Coordinator) {
		if clock != nil {
			c.clock = clock
		}
	})
}

// WithReplicas makes the operator's commands ([coordinator.Controller])
// wait for n replicas instead of as many as the master reports; 0 is
// ignored. A master reports the replicas connected to it, and guesses one
// when it has lost the link to the one it had; set n when the deployment's
// replica count is known, so that one replica gone quiet is not missed.
func WithReplicas(n int) Option {
	return optionFunc(func(c *Coordinator) {
		if n != 0 {
			c.replicas = n
		}
	})
}

// WithReplicaTimeout bounds how long an operator's command waits for
// replicas, instead of [DefaultReplicaTimeout]; 0 is ignored.
func WithReplicaTimeout(d time.Duration) Option {
	return optionFunc(func(c *Coordinator) {
		if d != 0 {
			c.replicaTimeout = d
		}
	})
}

// WithHeartbeat sets how often a [Coordinator.Watch] proves its feed
// (see the package documentation) instead of every 500 ms; 0 is ignored.
// A feed that hears no heartbeat for three periods is lost. A longer
// period costs Redis less (at 500 ms, two commands a second per shared
// heartbeat channel, whatever the number of replicas that share it; half
// that at 1 s) and hears of a silent feed, or a failover, later: within
// three periods. It panics below 10 ms.
func WithHeartbeat(every time.Duration) Option {
	return optionFunc(func(c *Coordinator) {
		if every != 0 {
			c.heartbeat = every
		}
	})
}

// New returns a coordinator that keeps its state in client, which may be a
// single-node client, a failover client or a cluster client. It panics if
// client is nil, if [WithPrefix] was given a prefix with a brace, which
// would break the hash tag that keeps a scope's keys in one cluster slot,
// or if [WithReplicas] was given a negative count, [WithReplicaTimeout]
// less than a millisecond or [WithHeartbeat] less than 10 ms.
func New(client goredis.UniversalClient, opts ...Option) *Coordinator {
	if client == nil || reflect.ValueOf(client).IsNil() {
		panic("redis coordinator: New: client is nil; pass a go-redis client (goredis.NewClient, NewClusterClient or NewUniversalClient)")
	}
	c := &Coordinator{client: client, prefix: DefaultPrefix, replicaTimeout: DefaultReplicaTimeout,
		heartbeat: heartbeatEvery, sharedCap: sharedCap}
	_, c.cluster = client.(*goredis.ClusterClient)
	for _, o := range opts {
		if o != nil {
			o.apply(c)
		}
	}
	if strings.ContainsAny(c.prefix, "{}") {
		panic(fmt.Sprintf("redis coordinator: prefix %q contains a brace; the coordinator adds its own hash tag", c.prefix))
	}
	if c.replicas < 0 {
		panic(fmt.Sprintf("redis coordinator: WithReplicas(%d): want a number of replicas, or 0 for as many as the master reports", c.replicas))
	}
	if c.heartbeat < 10*time.Millisecond {
		panic(fmt.Sprintf("redis coordinator: WithHeartbeat(%v): want at least 10ms", c.heartbeat))
	}
	if c.replicaTimeout < time.Millisecond {
		panic(fmt.Sprintf("redis coordinator: WithReplicaTimeout(%v): want at least 1ms, which WAIT counts in", c.replicaTimeout))
	}
	return c
}

// HonoursDeadlines implements [coordinator.Bounded]: go-redis bounds a
// call by its context's deadline only when the client's options set
// ContextTimeoutEnabled; otherwise a read waits up to the client's
// ReadTimeout (3 s by default), and a caller with a tighter bound must
// wait for the call in a goroutine of its own.
func (c *Coordinator) HonoursDeadlines() bool {
	switch cl := c.client.(type) {
	case *goredis.Client:
		return cl.Options().ContextTimeoutEnabled
	case *goredis.ClusterClient:
		return cl.Options().ContextTimeoutEnabled
	}
	return false
}

// access says how a script uses a scope: whether it writes and, if it
// does, the highest generation of the scope its caller has seen
// ([implement.Seen]).
type access struct {
	write bool
	seen  uint64
}

// reads is the access of a script that only reads.
var reads = access{}

// writes is the access of a script that writes for a caller that has seen
// generation seen.
func writes(seen uint64) access { return access{write: true, seen: seen} }

// call runs one script for op on scope, the one pick takes of the set
// that suits the server (scriptSet), on rdb, and reads the part of its
// reply that every script shares (reply in lib.lua). The first ARGV are
// the ones every script reads; scripts that write also get the scope, the
// GC margin and the generation seen.
func (c *Coordinator) call(ctx context.Context, rdb goredis.Scripter, pick scriptOf, op, scope string, p coordinator.Policy, use access, args ...any) (answer, error) {
	if err := p.Validate(); err != nil {
		return answer{}, opError(op, scope, err)
	}
	if err := coordinator.CheckScope(scope); use.write && err != nil {
		return answer{}, opError(op, scope, err)
	}
	now, margin := "", gcMargin
	if c.clock != nil {
		now = strconv.FormatInt(c.clock().UnixMilli(), 10)
		margin = testClockGCMargin
	}
	argv := make([]any, 0, 7+len(args))
	argv = append(argv, now, p.BucketWidth().Milliseconds(), p.Buckets)
	if use.write {
		argv = append(argv, scope, margin.Milliseconds(), strconv.FormatUint(use.seen, 10), p.RampFor.Milliseconds())
	}
	argv = append(argv, args...)
	set, err := c.scriptSet(ctx)
	if err != nil {
		return answer{}, opError(op, scope, err)
	}
	k := scopeKeys(c.prefix, scope)
	reply, err := pick(set).Run(ctx, rdb, k[:], argv...).Slice()
	if err != nil {
		if corrupt(err) {
			err = fmt.Errorf("%w: %w", coordinator.ErrCorruptState, err)
		}
		return answer{}, opError(op, scope, err)
	}
	a, err := readAnswer(reply, scope)
	if err != nil {
		return answer{}, opError(op, scope, err)
	}
	return a, nil
}

// opError names the operation and the scope.
func opError(op, scope string, err error) error {
	return fmt.Errorf("redis coordinator: %s %s: %w", op, abbreviate(scope), err)
}

// abbreviate quotes a scope for an error message, cut short: a scope may
// be megabytes long.
func abbreviate(scope string) string {
	const max = 200
	if len(scope) > max {
		return fmt.Sprintf("%q...(%d bytes)", scope[:max], len(scope))
	}
	return strconv.Quote(scope)
}

// Admit implements [coordinator.Coordinator].
func (c *Coordinator) Admit(ctx context.Context, q coordinator.AdmitRequest) (coordinator.Decision, error) {
	scope, p, claim := q.Scope, q.Policy, q.Claim
	a, err := c.call(ctx, c.client, admitScript, "admit", scope, p, writes(implement.Seen(q.Seen)),
		p.Probes, p.ProbeLease.Milliseconds(), claim)
	if err != nil {
		return coordinator.Decision{}, err
	}
	return admitted(scope, a)
}

// Record implements [coordinator.Coordinator].
func (c *Coordinator) Record(ctx context.Context, q coordinator.RecordRequest) (coordinator.Result, error) {
	p, outcomes := q.Policy, q.Outcomes
	// Runs of equal outcomes go as one: a replica's batch is mostly
	// successes of one generation, and record.lua counts a run of them at
	// once.
	encoding, fingerprint := p.Encoded()
	args := make([]any, 0, 11+3*4)
	args = append(args, p.MinCalls, implement.Permille(p.FailureRatio), implement.Permille(p.SlowCallRatio),
		p.ConsecutiveFailures, p.OpenFor.Milliseconds(), q.BatchID, implement.RecentBatches,
		fingerprint, int(q.Source), encoding, implement.RecentPolicies,
		replicaArg(q.Replica), p.Outliers, p.MaxOpenFor.Milliseconds(), implement.TrackedReplicas, implement.Markedly,
		p.BackoffAfter.Milliseconds())
	// Calls a dry run would have rejected are no calls: counted apart, by
	// generation, before the runs.
	would, calls := wouldReject(outcomes)
	args = append(args, len(would))
	for _, w := range would {
		args = append(args, strconv.FormatUint(w.gen, 10), w.n)
	}
	for i := 0; i < len(calls); {
		gen, flags := calls[i].Generation, outcomeFlags(p, calls[i])
		n := 1
		for i+n < len(calls) && calls[i+n].Generation == gen && outcomeFlags(p, calls[i+n]) == flags {
			n++
		}
		args = append(args, strconv.FormatUint(gen, 10), flags, n)
		i += n
	}
	a, err := c.call(ctx, c.client, recordScript, "record", q.Scope, p, writes(implement.Seen(q.Seen, outcomes...)), args...)
	if err != nil {
		return coordinator.Result{}, err
	}
	return recorded(q, a)
}

// genCount is how many outcomes carry one generation.
type genCount struct {
	gen uint64
	n   int
}

// wouldReject splits outcomes into the counts, by generation, of those a
// dry run would have rejected (Outcome.WouldReject), and the others.
func wouldReject(outcomes []coordinator.Outcome) (would []genCount, calls []coordinator.Outcome) {
	if !slices.ContainsFunc(outcomes, func(o coordinator.Outcome) bool { return o.WouldReject }) {
		return nil, outcomes
	}
	for _, o := range outcomes {
		if !o.WouldReject {
			calls = append(calls, o)
			continue
		}
		if i := slices.IndexFunc(would, func(w genCount) bool { return w.gen == o.Generation }); i >= 0 {
			would[i].n++
		} else {
			would = append(would, genCount{gen: o.Generation, n: 1})
		}
	}
	return would, calls
}

// outcomeFlags is how record.lua reads an outcome: 1 failure, 2 slow, 4
// throttled (alone: a throttled request is no call), 8 stalled (with 1),
// 16 an outlier's probe.
func outcomeFlags(p coordinator.Policy, o coordinator.Outcome) int {
	if o.Throttled {
		return 4
	}
	flags := 0
	if o.Failed() {
		flags |= 1
	}
	if o.Stalled {
		flags |= 8
	}
	if o.Probe {
		flags |= 16
	}
	if p.IsSlow(o.Duration) {
		flags |= 2
	}
	return flags
}

// Settle implements [coordinator.Coordinator].
func (c *Coordinator) Settle(ctx context.Context, q coordinator.SettleRequest) (coordinator.Result, error) {
	scope, p, claim, o := q.Scope, q.Policy, q.Claim, q.Outcome
	// A slow probe says the dependency has not recovered.
	failed := 0
	if o.Failed() || p.IsSlow(o.Duration) {
		failed = 1
	}
	return c.result(ctx, c.client, settleScript, "settle", scope, p, implement.Seen(q.Seen, o),
		claim, strconv.FormatUint(o.Generation, 10), failed,
		p.OpenFor.Milliseconds(), p.MaxOpenFor.Milliseconds(), p.ProbeSuccesses, p.BackoffAfter.Milliseconds())
}

// result runs a script that writes on rdb, for a caller that has seen
// generation seen, that replies with a [coordinator.Result] (resulted in
// reply.go).
func (c *Coordinator) result(ctx context.Context, rdb goredis.Scripter, pick scriptOf, op, scope string, p coordinator.Policy, seen uint64, args ...any) (coordinator.Result, error) {
	a, err := c.call(ctx, rdb, pick, op, scope, p, writes(seen), args...)
	if err != nil {
		return coordinator.Result{}, err
	}
	return resulted(op, scope, a)
}

// Snapshot implements [coordinator.Coordinator]. It runs a script that only
// reads (with EVALSHA rather than EVALSHA_RO, which Redis 6 lacks): a scope
// that is not born reads as such, generation 0.
func (c *Coordinator) Snapshot(ctx context.Context, scope string, p coordinator.Policy) (coordinator.Snapshot, error) {
	a, err := c.call(ctx, c.client, snapshotScript, "snapshot", scope, p, reads)
	if err != nil {
		return coordinator.Snapshot{}, err
	}
	return snapshotted(scope, a)
}
