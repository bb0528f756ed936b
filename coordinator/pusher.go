package coordinator

import "context"

// Pusher is implemented by coordinators that can open a breaker for as
// long as a server asked callers to stay away (server pushback: gRPC's
// grpc-retry-pushback-ms trailer, a google.rpc.RetryInfo detail). Both
// coordinators of this module implement it.
type Pusher interface {
	// Push opens the request's scope's breaker, fleet-wide, for its
	// Period, as one transition with its Reason, if the breaker is closed
	// or half-open in its Generation: the generation the pushed-back call
	// was admitted under. The call's own outcome may land first and open
	// the breaker by the rules (the failure that trips the window, a
	// failed probe): then, if the rules opened it from that generation and
	// no push has set the period since, Push sets the open period to end
	// Period from now, with no transition (Result.Transition nil, Stale
	// 0), so that the server's time wins whichever lands first. In any
	// other state or generation the push is stale (Result.Stale 1) and
	// changes nothing, so a burst of pushbacks answered to calls of one
	// generation makes one transition and sets the period once. A
	// disabled breaker never opens.
	//
	// The period is capped at Policy.MaxOpenFor, or Policy.OpenFor when
	// there is no back-off; a period of 0 or less asks for that cap: a
	// pushback that says "do not call again soon". (A server's pushback of
	// 0 says "retry now": no push at all.) Reopening after it doubles from
	// it, as after any open period.
	Push(ctx context.Context, r PushRequest) (Result, error)
}
