package coordinator

import (
	"context"
	"errors"
	"fmt"
)

// CauseKeeper is implemented by coordinators that keep, with a scope's
// state, the span that recorded the transition into it, so that a replica
// that rejects a call can link its span to the trace that opened the
// breaker, whichever replica that was.
//
// The span exists only once the transition does: the replica whose
// operation made the transition traces it from the answer, then hands its
// span context back with KeepCause. From then on the answers that report
// the state carry it (Decision.Cause, Result.Cause), and the feed delivers
// the transition once more with its Cause set, for the replicas that
// learned of it from the feed; until then they carry none.
type CauseKeeper interface {
	// KeepCause stores r.Cause as the cause of the scope's state when the
	// scope is still in r.Generation and r.State, moved there by a
	// transition the coordinator published, and has no cause yet: the
	// first word stays, a late one about a state since left changes
	// nothing. It reports whether it stored the cause. A cause that is no
	// traceparent is an error wrapping [ErrInvalidCause].
	KeepCause(ctx context.Context, r CauseRequest) (bool, error)
}

// CauseRequest is everything a [CauseKeeper.KeepCause] takes.
type CauseRequest struct {
	Scope string
	// Generation and State are the transition's: Transition.Generation
	// and Transition.To.
	Generation uint64
	State      State
	// Cause is the span context of the span that recorded the transition,
	// as a W3C Trace Context traceparent
	// ("00-<32 hex trace ID>-<16 hex span ID>-<2 hex flags>"), so that
	// this package needs no tracing library; see [CheckCause].
	Cause string
}

// ErrInvalidCause is wrapped by the error of a KeepCause whose cause is
// not a traceparent.
var ErrInvalidCause = errors.New("invalid cause")

// CheckCause reports whether cause is a traceparent of version 00 with
// lower-case hex digits, as the W3C Trace Context spells it: the form a
// coordinator stores and answers. IDs of all zeros are refused, as the
// specification refuses them.
func CheckCause(cause string) error {
	const size = 2 + 1 + 32 + 1 + 16 + 1 + 2
	bad := func(why string) error {
		return fmt.Errorf("%w: %.80q %s", ErrInvalidCause, cause, why)
	}
	if len(cause) != size || cause[:3] != "00-" || cause[35] != '-' || cause[52] != '-' {
		return bad("is not 00-<32 hex>-<16 hex>-<2 hex>")
	}
	for i, c := range []byte(cause) {
		if i == 2 || i == 35 || i == 52 {
			continue
		}
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return bad("holds a character that is no lower-case hex digit")
		}
	}
	if cause[3:35] == zeros[:32] || cause[36:52] == zeros[:16] {
		return bad("has an ID of all zeros")
	}
	return nil
}

const zeros = "00000000000000000000000000000000"
