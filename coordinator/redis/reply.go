package redis

import (
	"fmt"
	"time"

	"github.com/cbgrpc/cbgrpc/coordinator"
)

// answer is the part of a reply that every script shares (reply in
// lib.lua), and the rest, the operation's own values.
type answer struct {
	state      coordinator.State
	generation uint64
	retryAfter time.Duration
	rampLeft   time.Duration
	// policyVersion is the version of the scope's override (policy.go).
	policyVersion uint64
	now           int64 // the script's clock, Unix ms
	transition    *coordinator.Transition
	cause         string // the cause of the state (cause.go), when the reply has one
	// own holds the whole reply, from which an operation reads its own
	// names.
	own *pairs
}

func readAnswer(reply []any, scope string) (answer, error) {
	p := readPairs(reply)
	a := answer{
		state:      coordinator.State(p.int("state")),
		generation: p.uint("generation"),
		retryAfter: time.Duration(p.zeroOr("retry_after")) * time.Millisecond,
		rampLeft:   time.Duration(p.zeroOr("ramp_left")) * time.Millisecond,
		now:        p.int("now"),
		own:        p,
	}
	if p.has("policy_version") {
		a.policyVersion = p.uint("policy_version")
	}
	// A cause is a traceparent or nothing: the state hash holds what any
	// client with write access gave it.
	if p.has("cause") && coordinator.CheckCause(p.str("cause")) == nil {
		a.cause = p.str("cause")
	}
	if p.has("moved_from") {
		t := newTransition(scope, p.int("moved_from"), p.int("moved_to"), p.uint("moved_generation"), a.now,
			p.int("moved_until"), p.str("moved_reason"))
		a.transition = &t
	}
	if p.err != nil {
		return answer{}, p.err
	}
	return a, nil
}

// newTransition is a transition as a script reports it and as the feed
// carries it: states as numbers, times in Unix milliseconds.
func newTransition(scope string, from, to int64, generation uint64, at, openUntil int64, reason string) coordinator.Transition {
	return coordinator.Transition{
		Scope:      scope,
		From:       coordinator.State(from),
		To:         coordinator.State(to),
		Generation: generation,
		At:         time.UnixMilli(at),
		Reason:     reason,
		OpenUntil:  unixMilli(openUntil),
	}
}

// unixMilli is the time ms milliseconds after the Unix epoch; 0 is the
// zero time (none).
func unixMilli(ms int64) time.Time {
	if ms == 0 {
		return time.Time{}
	}
	return time.UnixMilli(ms)
}

// errReply is a reply of the wrong shape. Redis answered, so it is not
// Redis failing: a script replies what it read from the scope's keys, and
// junk there (a number too large for a reply's integer, or none where
// the reply needed one) is what bends a reply, so the scope is corrupt.
var errReply = fmt.Errorf("%w: unexpected reply", coordinator.ErrCorruptState)

// pairs is a script's reply read by name: the scripts reply name/value
// pairs (reply in lib.lua), of which a reader takes the names it knows
// and ignores the others. It keeps the first error, so that a reply of
// the wrong shape, or without a name the reader needs, is reported rather
// than read as zeros. A value a script could not make (nil, as from junk
// it read) ends a Lua reply early, where a name is left without its
// value: never a reply of pairs.
type pairs struct {
	values map[string]any
	err    error
}

// readPairs reads reply as name/value pairs.
func readPairs(reply []any) *pairs {
	p := &pairs{values: make(map[string]any, len(reply)/2)}
	if len(reply)%2 != 0 {
		p.err = fmt.Errorf("%w: %d values, not name/value pairs", errReply, len(reply))
		return p
	}
	for i := 0; i < len(reply); i += 2 {
		name, ok := reply[i].(string)
		if !ok {
			p.err = fmt.Errorf("%w: value %d is %T, want a name", errReply, i, reply[i])
			return p
		}
		p.values[name] = reply[i+1]
	}
	return p
}

// has reports whether the reply names name.
func (p *pairs) has(name string) bool {
	_, ok := p.values[name]
	return ok
}

// value returns the value of name as a T, which the error calls want.
func value[T any](p *pairs, name, want string) T {
	var v T
	if p.err != nil {
		return v
	}
	raw, ok := p.values[name]
	if !ok {
		p.err = fmt.Errorf("%w: no %s", errReply, name)
		return v
	}
	if v, ok = raw.(T); !ok {
		p.err = fmt.Errorf("%w: %s is %T, want %s", errReply, name, raw, want)
	}
	return v
}

func (p *pairs) int(name string) int64 { return value[int64](p, name, "an integer") }

// zeroOr is the integer value of name, or 0 when the reply leaves it
// out.
func (p *pairs) zeroOr(name string) int64 {
	if !p.has(name) {
		return 0
	}
	return p.int(name)
}

func (p *pairs) str(name string) string { return value[string](p, name, "a string") }

func (p *pairs) uint(name string) uint64 {
	n := p.int(name)
	if n < 0 && p.err == nil {
		p.err = fmt.Errorf("%w: negative %s %d", errReply, name, n)
	}
	return uint64(n)
}

// each calls f with each entry of the list name, name/value pairs each;
// an entry of the wrong shape, or without a name f needs, is p's error.
func (p *pairs) each(name string, f func(entry *pairs)) {
	for _, raw := range value[[]any](p, name, "a list") {
		if p.err != nil {
			return
		}
		values, ok := raw.([]any)
		if !ok {
			p.err = fmt.Errorf("%w: an entry of %s is %T, want name/value pairs", errReply, name, raw)
			return
		}
		entry := readPairs(values)
		f(entry)
		p.err = entry.err
	}
}

// replyReader reads a reply of values by position, keeping the first
// error: a policy layer, as readLayer (policy.go) takes it, in the order
// of the fields it was read from.
type replyReader struct{ err error }

// read returns reply[i] as a T, which the error calls want.
func read[T any](r *replyReader, reply []any, i int, want string) T {
	var v T
	if r.err != nil {
		return v
	}
	if i >= len(reply) {
		r.err = fmt.Errorf("%w: %d values, want more than %d", errReply, len(reply), i)
		return v
	}
	v, ok := reply[i].(T)
	if !ok {
		r.err = fmt.Errorf("%w: value %d is %T, want %s", errReply, i, reply[i], want)
	}
	return v
}

func (r *replyReader) str(reply []any, i int) string { return read[string](r, reply, i, "a string") }

// admitted reads what an Admit answered.
func admitted(scope string, a answer) (coordinator.Decision, error) {
	d := coordinator.Decision{
		Verdict:       coordinator.Verdict(a.own.int("verdict")),
		State:         a.state,
		Generation:    a.generation,
		RetryAfter:    a.retryAfter,
		RampLeft:      a.rampLeft,
		Transition:    a.transition,
		PolicyVersion: a.policyVersion,
		Cause:         a.cause,
	}
	if a.own.err != nil {
		return coordinator.Decision{}, opError("admit", scope, a.own.err)
	}
	return d, nil
}

// resulted reads what a script that writes answered as a
// [coordinator.Result]: the shared part, then the number of stale
// outcomes, then, from a Record that counted, the window's counts.
func resulted(op, scope string, a answer) (coordinator.Result, error) {
	p := a.own
	res := coordinator.Result{
		State:         a.state,
		Generation:    a.generation,
		Stale:         int(p.int("stale")),
		RetryAfter:    a.retryAfter,
		RampLeft:      a.rampLeft,
		Transition:    a.transition,
		PolicyVersion: a.policyVersion,
		Cause:         a.cause,
	}
	// calls is there when the Record counted and left the breaker closed.
	if p.has("calls") {
		res.Calls, res.Failures = int(p.int("calls")), int(p.int("failures"))
		res.Slow, res.Throttled = int(p.int("slow")), int(p.int("throttled"))
	}
	if p.err != nil {
		return coordinator.Result{}, opError(op, scope, p.err)
	}
	return res, nil
}

// recorded reads what a Record answered: a result, and what mod.answer
// (replicas.lua) adds of its replica.
func recorded(q coordinator.RecordRequest, a answer) (coordinator.Result, error) {
	res, err := resulted("record", q.Scope, a)
	if err != nil {
		return res, err
	}
	p := a.own
	if p.has("outlier_until") {
		until := p.int("outlier_until")
		res.Outlier = &coordinator.Outlier{Replica: q.Replica, Since: unixMilli(p.int("outlier_since")),
			Until: unixMilli(until), RetryAfter: max(0, time.Duration(until-a.now)*time.Millisecond),
			Reason: p.str("outlier_reason")}
	}
	if p.has("own_from") && res.Transition == nil {
		t := newTransition(q.Scope, p.int("own_from"), p.int("own_to"), a.generation, a.now,
			p.int("own_until"), p.str("own_reason"))
		t.Replica = q.Replica
		res.Transition = &t
	}
	if p.err != nil {
		return coordinator.Result{}, opError("record", q.Scope, p.err)
	}
	return res, nil
}

// snapshotted reads what a Snapshot answered: of a scope that is not born
// (generation 0), the shared part alone.
func snapshotted(scope string, a answer) (coordinator.Snapshot, error) {
	s := coordinator.Snapshot{Scope: scope, State: a.state, Generation: a.generation}
	if a.generation == 0 {
		return s, nil
	}
	p := a.own
	s.Calls, s.Failures, s.Slow = int(p.int("calls")), int(p.int("failures")), int(p.int("slow"))
	s.ConsecutiveFailures = int(p.int("consecutive_failures"))
	s.OpenedAt, s.OpenUntil = unixMilli(p.int("opened_at")), unixMilli(p.int("open_until"))
	s.ProbesInFlight, s.ProbeSuccesses = int(p.int("probes_in_flight")), int(p.int("probe_successes"))
	if at := p.int("noted_at"); at != 0 {
		s.Operator = coordinator.Note{By: p.str("note_by"), Reason: p.str("note_reason"),
			For: time.Duration(p.int("note_for")) * time.Millisecond}
		s.ForcedAt = unixMilli(at)
	}
	if at := p.int("trip_at"); at != 0 {
		s.LastTrip = coordinator.Trip{At: unixMilli(at), Reason: p.str("trip_reason"), Generation: p.uint("trip_generation"),
			Calls: int(p.int("trip_calls")), Failures: int(p.int("trip_failures")), Slow: int(p.int("trip_slow"))}
	}
	s.Throttled = int(p.int("throttled"))
	s.WouldReject = int(p.int("would_reject"))
	p.each("outliers", func(e *pairs) {
		until := unixMilli(e.int("until"))
		s.Outliers = append(s.Outliers, coordinator.Outlier{Replica: replicaOf(e.str("replica")),
			Since: unixMilli(e.int("since")), Until: until, RetryAfter: max(0, until.Sub(time.UnixMilli(a.now))),
			Reason: e.str("reason")})
	})
	s.Policies = carriedPolicies(p)
	if p.err != nil {
		return coordinator.Snapshot{}, opError("snapshot", scope, p.err)
	}
	return s, nil
}
