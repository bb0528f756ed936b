package coordinator

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// Controller is implemented by coordinators that let an operator force a
// breaker's state for the whole fleet. Each method is one atomic operation
// like those of [Coordinator]: it reads the clock once, and a change of
// state is a [Transition] like any other, returned in the [Result] and
// published to [Watcher] subscriptions. Its Reason carries the operator's
// note ("isolated by alice for 10m0s: payments outage").
//
// Generations: Isolate, Release and Disable start a new generation with an
// empty window, as a trip and a recovery do, so that nothing admitted
// before them counts after them, and so that a replica can order what it
// hears by generation alone (an answer "open" given just before Disable
// cannot be mistaken for news). Enable keeps the generation and the
// window: it only switches the rules back on, so the outcomes counted
// while disabled, and those of calls still in flight, stay in the window
// and are judged by the rules from the next Record on.
//
// Manual states never expire; an isolation for a set time ends lazily,
// like an open period: from its end on, Snapshot reads the scope as not
// born, and the first operation other than Snapshot makes the transition
// "isolation ended" into a new generation, then does its own work on the
// closed breaker, reporting the end unless it makes a transition of its
// own (both are published, the end first). Calling a method that would not
// change the state (Release of a closed breaker, Enable of one that is not
// disabled) changes nothing and reports no transition, so retrying any of
// them is safe. Isolate of an isolated breaker replaces its note and end.
//
// Durability: a coordinator whose store has replicas waits, after the
// change, for them to have it, within a bounded time, and says in
// Result.Replicas whether they did (see [Replication]): a failover to a
// replica the change did not reach loses it.
type Controller interface {
	// Isolate forces the breaker open: every Admit rejects and no probe is
	// sent until Release, or until Note.For has passed when it is set. It
	// starts a new generation and drops the window and probe leases.
	// Note.Reason is required.
	Isolate(ctx context.Context, r CommandRequest) (Result, error)

	// Release puts a breaker that is not closed (open, half-open, isolated
	// or disabled) back to closed, in a new generation with an empty
	// window.
	Release(ctx context.Context, r CommandRequest) (Result, error)

	// Disable forces the breaker closed: every Admit allows and Record
	// still counts outcomes, but nothing trips it until Enable. It starts
	// a new generation and drops the window and probe leases. Note.Reason
	// is required.
	Disable(ctx context.Context, r CommandRequest) (Result, error)

	// Enable puts a disabled breaker back under its rules, closed, in the
	// same generation with the window it counted while disabled.
	Enable(ctx context.Context, r CommandRequest) (Result, error)

	// SetOverride merges o into the override stored for t (see
	// [Override.Merge]: a field o marks for removal is removed), and
	// stores the result after validating it (implement.CheckOverride): a bad field, or
	// a key of o that is no Go name of a field ("min_calls"), is refused,
	// naming it, and nothing is stored. The change gets a new
	// version and is published to every Watch that follows the scope (or
	// every Watch, for the fleet default; see [PolicyWatch]), and Breakers
	// apply it from their next call on. It returns the layers now stored
	// for t (for a scope, the fleet default as well) and, like the other
	// commands, whether the change reached the replicas. An override left
	// with no field is removed, as by ResetOverride.
	SetOverride(ctx context.Context, t Target, o Override, n Note) (Overrides, error)

	// ResetOverride removes t's override, so that Breakers fall back to
	// the fleet default or their code's policy. Resetting a target with
	// no override changes nothing and publishes nothing.
	ResetOverride(ctx context.Context, t Target, n Note) (Overrides, error)

	// Overrides reads the layers of t: the fleet default and, for a
	// scope, its override, as SetOverride of t returns them.
	Overrides(ctx context.Context, t Target) (Overrides, error)
}

// Replication is whether an operator's change reached the replicas of the
// store that holds it, as [Result].Replicas:
//
//   - Wanted 0: there was nothing to wait for. The in-process coordinator
//     and a Redis without replicas have none.
//   - Confirmed >= Wanted > 0: every replica waited for has the change.
//   - 0 < Confirmed < Wanted: some have it; the others did not confirm
//     within the wait.
//   - Confirmed 0 < Wanted: no replica confirmed it. The change is in
//     force, but a failover now may lose it; repeating the command once
//     the replicas are back confirms it.
//
// It is a field, not an error, because the change was made and the Result
// describes it: an error would have every caller that stops at err != nil
// (the Breaker's round trip among them) take a change in force for a
// failure, and partial confirmation is not a failure at all. A caller that
// must not go on with an unconfirmed change checks Confirmed.
type Replication struct {
	Wanted    int // replicas the change was waited for; 0 when there were none
	Confirmed int // replicas that acknowledged it within the wait; may exceed Wanted
}

// Note is what an operator says about a manual change: who, why, and for
// Isolate how long.
type Note struct {
	By     string        // who: a person or a tool, optional
	Reason string        // why; required by Isolate and Disable
	For    time.Duration // Isolate only: the isolation ends by itself after this long; 0 = until released
}

// Limits on a [Note], so that a note fits a table row and a log line.
const (
	MaxNoteBy     = 200
	MaxNoteReason = 1000
)

// ErrInvalidNote is wrapped by every error that [Note.Validate] returns.
var ErrInvalidNote = errors.New("invalid note")

// NoteError is the error [Note.Validate] returns: Field is the field of
// the [Note] that is wrong ("By", "Reason" or "For"), or "" when the
// operation itself is.
type NoteError struct {
	Field string
	msg   string
}

func (e *NoteError) Error() string { return ErrInvalidNote.Error() + ": " + e.msg }

// Unwrap returns [ErrInvalidNote].
func (e *NoteError) Unwrap() error { return ErrInvalidNote }

// Validate reports whether n can go with op, one of "isolate", "release",
// "disable", "enable" and "override"; the error is a [*NoteError], wraps
// [ErrInvalidNote], and says which field is wrong and why. By and Reason
// must be valid UTF-8 without control characters: they end up on
// operators' terminals. The Controller methods call it.
func (n Note) Validate(op string) error {
	bad := func(field, format string, args ...any) error {
		return &NoteError{Field: field, msg: fmt.Sprintf(format, args...)}
	}
	switch op {
	case "isolate", "disable":
		if strings.TrimSpace(n.Reason) == "" {
			return bad("Reason", "a reason is required to %s a breaker", op)
		}
	case "release", "enable", "override":
	default:
		return bad("", "unknown operation %q", op)
	}
	if n.For < 0 {
		return bad("For", "For is %v; want 0 (until released) or more", n.For)
	}
	if n.For != 0 && op != "isolate" {
		return bad("For", "For is %v; only isolate takes a duration", n.For)
	}
	if n.For != 0 && n.For < time.Millisecond {
		return bad("For", "For is %v; coordinators count whole milliseconds", n.For)
	}
	if len(n.By) > MaxNoteBy {
		return bad("By", "By is %d bytes; at most %d", len(n.By), MaxNoteBy)
	}
	if len(n.Reason) > MaxNoteReason {
		return bad("Reason", "Reason is %d bytes; at most %d", len(n.Reason), MaxNoteReason)
	}
	for _, f := range [...]struct{ name, v string }{{"By", n.By}, {"Reason", n.Reason}} {
		if i := invalidUTF8(f.v); i >= 0 {
			return bad(f.name, "%s holds the byte %#x at byte %d, which is not UTF-8; a note is text", f.name, f.v[i], i)
		}
		if i := strings.IndexFunc(f.v, unicode.IsControl); i >= 0 {
			r, _ := utf8.DecodeRuneInString(f.v[i:])
			return bad(f.name, "%s holds control character %q at byte %d; a note is one line of text", f.name, r, i)
		}
	}
	return nil
}

// invalidUTF8 is the index of the first byte of s that is not UTF-8, or -1.
func invalidUTF8(s string) int {
	for i, r := range s {
		if r == utf8.RuneError {
			if _, size := utf8.DecodeRuneInString(s[i:]); size == 1 {
				return i
			}
		}
	}
	return -1
}
