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
	rest          []any
}

// shared is how many values of a reply answer reads:
// {state, generation, retry after ms, now, from, to, generation after,
// open until, reason, ramp left ms, policy version}.
const shared = 11

func readAnswer(reply []any, scope string) (answer, error) {
	var r replyReader
	a := answer{
		state:         coordinator.State(r.int(reply, 0)),
		generation:    r.uint(reply, 1),
		retryAfter:    time.Duration(r.int(reply, 2)) * time.Millisecond,
		rampLeft:      time.Duration(r.int(reply, 9)) * time.Millisecond,
		policyVersion: r.uint(reply, 10),
	}
	now, from := r.int(reply, 3), r.int(reply, 4)
	a.now = now
	if from >= 0 {
		t := newTransition(scope, from, r.int(reply, 5), r.uint(reply, 6), now, r.int(reply, 7), r.str(reply, 8))
		a.transition = &t
	}
	if r.err != nil {
		return answer{}, r.err
	}
	a.rest = reply[shared:]
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

// replyReader reads a script's reply, keeping the first error so that a
// reply of the wrong shape is reported rather than read as zeros.
type replyReader struct{ err error }

// errReply is a reply of the wrong shape. Redis answered, so it is not
// Redis failing: a script replies what it read from the scope's keys, and
// junk there (a number too large for a reply's integer, or none where
// the reply needed one) is what bends a reply, so the scope is corrupt.
var errReply = fmt.Errorf("%w: unexpected reply", coordinator.ErrCorruptState)

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

func (r *replyReader) int(reply []any, i int) int64 { return read[int64](r, reply, i, "an integer") }

func (r *replyReader) str(reply []any, i int) string { return read[string](r, reply, i, "a string") }

func (r *replyReader) uint(reply []any, i int) uint64 {
	n := r.int(reply, i)
	if n < 0 && r.err == nil {
		r.err = fmt.Errorf("%w: negative generation %d", errReply, n)
	}
	return uint64(n)
}

// The values answer_record (record.lua) puts after the shared ones; the
// outlier's and the replica's transition only when there is one.
const (
	recordStale = iota
	recordCalls // -1: the Record counted nothing, or left the breaker not closed
	recordFailures
	recordSlow
	recordThrottled
	recordOutlierSince
	recordOutlierUntil
	recordOutlierReason
	recordOwnFrom
	recordOwnTo
	recordOwnUntil
	recordOwnReason
)

// recorded reads what a Record answered.
func recorded(q coordinator.RecordRequest, a answer) (coordinator.Result, error) {
	var r replyReader
	res := coordinator.Result{
		State:         a.state,
		Generation:    a.generation,
		Stale:         int(r.int(a.rest, recordStale)),
		RetryAfter:    a.retryAfter,
		RampLeft:      a.rampLeft,
		Transition:    a.transition,
		PolicyVersion: a.policyVersion,
	}
	if calls := r.int(a.rest, recordCalls); calls >= 0 {
		res.Calls, res.Failures = int(calls), int(r.int(a.rest, recordFailures))
		res.Slow, res.Throttled = int(r.int(a.rest, recordSlow)), int(r.int(a.rest, recordThrottled))
	}
	if len(a.rest) > recordOutlierSince {
		if until := r.int(a.rest, recordOutlierUntil); until != 0 {
			res.Outlier = &coordinator.Outlier{Replica: q.Replica, Since: unixMilli(r.int(a.rest, recordOutlierSince)),
				Until: unixMilli(until), RetryAfter: max(0, time.Duration(until-a.now)*time.Millisecond),
				Reason: r.str(a.rest, recordOutlierReason)}
		}
		if from := r.int(a.rest, recordOwnFrom); from >= 0 && res.Transition == nil {
			t := newTransition(q.Scope, from, r.int(a.rest, recordOwnTo), a.generation, a.now,
				r.int(a.rest, recordOwnUntil), r.str(a.rest, recordOwnReason))
			t.Replica = q.Replica
			res.Transition = &t
		}
	}
	if r.err != nil {
		return coordinator.Result{}, opError("record", q.Scope, r.err)
	}
	return res, nil
}
