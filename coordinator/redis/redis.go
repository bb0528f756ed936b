package redis

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strconv"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/cbgrpc/cbgrpc/coordinator"
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

// Coordinator is a [coordinator.Coordinator] on Redis. It holds no state of
// its own: every method is one script call. Create one with [New]; it is
// safe for concurrent use.
type Coordinator struct {
	client  goredis.UniversalClient
	prefix  string
	clock   func() time.Time
	scripts *scripts
	sharded bool // a Redis Cluster: transitions go out by sharded pub/sub
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

// New returns a coordinator that keeps its state in client, which may be a
// single-node client, a failover client or a cluster client. It panics if
// client is nil, or if [WithPrefix] was given a prefix with a brace, which
// would break the hash tag that keeps a scope's keys in one cluster slot.
func New(client goredis.UniversalClient, opts ...Option) *Coordinator {
	if client == nil || reflect.ValueOf(client).IsNil() {
		panic("redis coordinator: New: client is nil; pass a go-redis client (goredis.NewClient, NewClusterClient or NewUniversalClient)")
	}
	c := &Coordinator{client: client, prefix: DefaultPrefix, scripts: plainScripts}
	if _, ok := client.(*goredis.ClusterClient); ok {
		c.scripts, c.sharded = shardedScripts, true
	}
	for _, o := range opts {
		if o != nil {
			o.apply(c)
		}
	}
	if strings.ContainsAny(c.prefix, "{}") {
		panic(fmt.Sprintf("redis coordinator: prefix %q contains a brace; the coordinator adds its own hash tag", c.prefix))
	}
	return c
}

// call runs one script for op on scope. The first ARGV are the ones every
// script reads (lib.lua); write scripts also get a fresh generation, the
// scope and the GC margin.
func (c *Coordinator) call(ctx context.Context, s *goredis.Script, op, scope string, p coordinator.Policy, write bool, args ...any) ([]any, error) {
	if err := p.Validate(); err != nil {
		return nil, opError(op, scope, err)
	}
	now, margin := "", gcMargin
	if c.clock != nil {
		now = strconv.FormatInt(c.clock().UnixMilli(), 10)
		margin = testClockGCMargin
	}
	argv := make([]any, 0, 6+len(args))
	argv = append(argv, now, p.BucketWidth().Milliseconds(), p.Buckets)
	if write {
		// A lost state restarts in this generation: 44 random bits are
		// exact in Lua's doubles and print as at most 14 digits.
		argv = append(argv, rand.Int64N(1<<44)+1, scope, margin.Milliseconds())
	}
	argv = append(argv, args...)
	k := scopeKeys(c.prefix, scope)
	reply, err := s.Run(ctx, c.client, k[:], argv...).Slice()
	if err != nil {
		if corrupt(err) {
			err = fmt.Errorf("%w: %w", coordinator.ErrCorruptState, err)
		}
		return nil, opError(op, scope, err)
	}
	return reply, nil
}

// corrupt reports whether err is Redis refusing this scope's data (a key
// of the wrong type, or a script failing on what it read) rather than
// Redis or the network failing: LOADING, BUSY, READONLY, OOM, NOPERM and
// connection errors concern every scope.
func corrupt(err error) bool {
	var reply goredis.Error
	if !errors.As(err, &reply) {
		return false
	}
	msg := reply.Error()
	return strings.HasPrefix(msg, "WRONGTYPE") || strings.HasPrefix(msg, "ERR user_script")
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
func (c *Coordinator) Admit(ctx context.Context, scope string, p coordinator.Policy, claim string) (coordinator.Decision, error) {
	reply, err := c.call(ctx, c.scripts.admit, "admit", scope, p, true,
		p.Probes, p.ProbeLease.Milliseconds(), claim)
	if err != nil {
		return coordinator.Decision{}, err
	}
	var r replyReader
	d := coordinator.Decision{
		Verdict:    coordinator.Verdict(r.int(reply, 0)),
		State:      coordinator.State(r.int(reply, 1)),
		Generation: r.uint(reply, 2),
		RetryAfter: time.Duration(r.int(reply, 3)) * time.Millisecond,
	}
	d.Transition = r.transition(reply, 4, scope)
	if r.err != nil {
		return coordinator.Decision{}, opError("admit", scope, r.err)
	}
	return d, nil
}

// Record implements [coordinator.Coordinator]. A batch ID set with
// [coordinator.WithBatchID] makes a retried Record stale.
func (c *Coordinator) Record(ctx context.Context, scope string, p coordinator.Policy, outcomes []coordinator.Outcome) (coordinator.Result, error) {
	args := make([]any, 0, 7+2*len(outcomes))
	args = append(args, p.MinCalls, coordinator.Permille(p.FailureRatio), coordinator.Permille(p.SlowCallRatio),
		p.ConsecutiveFailures, p.OpenFor.Milliseconds(), coordinator.BatchID(ctx), coordinator.RecentBatches)
	for _, o := range outcomes {
		flags := 0
		if o.Failure {
			flags |= 1
		}
		if p.IsSlow(o.Duration) {
			flags |= 2
		}
		args = append(args, strconv.FormatUint(o.Generation, 10), flags)
	}
	reply, err := c.call(ctx, c.scripts.record, "record", scope, p, true, args...)
	if err != nil {
		return coordinator.Result{}, err
	}
	return c.result("record", scope, reply)
}

// Settle implements [coordinator.Coordinator].
func (c *Coordinator) Settle(ctx context.Context, scope string, p coordinator.Policy, claim string, o coordinator.Outcome) (coordinator.Result, error) {
	// A slow probe says the dependency has not recovered.
	failed := 0
	if o.Failure || p.IsSlow(o.Duration) {
		failed = 1
	}
	reply, err := c.call(ctx, c.scripts.settle, "settle", scope, p, true,
		claim, strconv.FormatUint(o.Generation, 10), failed,
		p.OpenFor.Milliseconds(), p.MaxOpenFor.Milliseconds(), p.ProbeSuccesses)
	if err != nil {
		return coordinator.Result{}, err
	}
	return c.result("settle", scope, reply)
}

func (c *Coordinator) result(op, scope string, reply []any) (coordinator.Result, error) {
	var r replyReader
	res := coordinator.Result{
		State:      coordinator.State(r.int(reply, 0)),
		Generation: r.uint(reply, 1),
		Stale:      int(r.int(reply, 2)),
	}
	res.Transition = r.transition(reply, 3, scope)
	if r.err != nil {
		return coordinator.Result{}, opError(op, scope, r.err)
	}
	return res, nil
}

// Snapshot implements [coordinator.Coordinator]. It runs a script that only
// reads (with EVALSHA rather than EVALSHA_RO, which Redis 6 lacks).
func (c *Coordinator) Snapshot(ctx context.Context, scope string, p coordinator.Policy) (coordinator.Snapshot, error) {
	reply, err := c.call(ctx, c.scripts.snapshot, "snapshot", scope, p, false)
	if err != nil {
		return coordinator.Snapshot{}, err
	}
	var r replyReader
	s := coordinator.Snapshot{
		Scope:               scope,
		State:               coordinator.State(r.int(reply, 0)),
		Generation:          r.uint(reply, 2),
		Calls:               int(r.int(reply, 3)),
		Failures:            int(r.int(reply, 4)),
		Slow:                int(r.int(reply, 5)),
		ConsecutiveFailures: int(r.int(reply, 6)),
		ProbesInFlight:      int(r.int(reply, 9)),
		ProbeSuccesses:      int(r.int(reply, 10)),
	}
	if at := r.int(reply, 7); at != 0 {
		s.OpenedAt = time.UnixMilli(at)
	}
	if until := r.int(reply, 8); until != 0 {
		s.OpenUntil = time.UnixMilli(until)
	}
	if at := r.int(reply, 14); at != 0 {
		s.Operator = coordinator.Note{By: r.str(reply, 11), Reason: r.str(reply, 12), For: time.Duration(r.int(reply, 13)) * time.Millisecond}
		s.ForcedAt = time.UnixMilli(at)
	}
	if r.err != nil {
		return coordinator.Snapshot{}, opError("snapshot", scope, r.err)
	}
	return s, nil
}

// replyReader reads a script's reply, keeping the first error so that a
// reply of the wrong shape is reported rather than read as zeros.
type replyReader struct{ err error }

var errReply = errors.New("unexpected script reply")

func (r *replyReader) int(reply []any, i int) int64 {
	if r.err != nil {
		return 0
	}
	if i >= len(reply) {
		r.err = fmt.Errorf("%w: %d values, want more than %d", errReply, len(reply), i)
		return 0
	}
	n, ok := reply[i].(int64)
	if !ok {
		r.err = fmt.Errorf("%w: value %d is %T, want an integer", errReply, i, reply[i])
	}
	return n
}

func (r *replyReader) str(reply []any, i int) string {
	if r.err != nil {
		return ""
	}
	if i >= len(reply) {
		r.err = fmt.Errorf("%w: %d values, want more than %d", errReply, len(reply), i)
		return ""
	}
	s, ok := reply[i].(string)
	if !ok {
		r.err = fmt.Errorf("%w: value %d is %T, want a string", errReply, i, reply[i])
	}
	return s
}

func (r *replyReader) uint(reply []any, i int) uint64 {
	n := r.int(reply, i)
	if n < 0 && r.err == nil {
		r.err = fmt.Errorf("%w: negative generation %d", errReply, n)
	}
	return uint64(n)
}

// transition reads {now, from, to, generation, reason} at i; from < 0
// means no transition.
func (r *replyReader) transition(reply []any, i int, scope string) *coordinator.Transition {
	now, from := r.int(reply, i), r.int(reply, i+1)
	if r.err != nil || from < 0 {
		return nil
	}
	t := &coordinator.Transition{
		Scope:      scope,
		From:       coordinator.State(from),
		To:         coordinator.State(r.int(reply, i+2)),
		Generation: r.uint(reply, i+3),
		At:         time.UnixMilli(now),
	}
	if i+4 < len(reply) {
		t.Reason, _ = reply[i+4].(string)
	}
	return t
}
