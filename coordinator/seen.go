package coordinator

import "context"

type seenKey struct{}

// WithSeen tells a write (Admit, Record, Settle, a [Controller] command)
// the highest generation of its scope that the caller has learned from
// this coordinator: from an answer or from the transition feed.
//
// A coordinator whose stored generation is lower has lost state that it
// once acknowledged: a failover that promoted a replica the trip had not
// reached, a restore from a backup. It treats the scope as not born and
// gives birth to it above the seen generation before it answers (see
// [NextGeneration]), so that no generation handed out before the loss is
// handed out again, and outcomes admitted before it stay stale.
//
// A generation 0 says nothing, as does a context without WithSeen.
func WithSeen(ctx context.Context, generation uint64) context.Context {
	return context.WithValue(ctx, seenKey{}, generation)
}

// Seen returns the highest of the generation set by [WithSeen] and the
// generations of outcomes: an outcome carries the generation its call was
// admitted under, which the coordinator handed out. A value above
// [MaxGeneration] is no generation a coordinator hands out, and counts for
// nothing. Coordinators call Seen to apply the rule of WithSeen.
func Seen(ctx context.Context, outcomes ...Outcome) uint64 {
	seen, _ := ctx.Value(seenKey{}).(uint64)
	if seen > MaxGeneration {
		seen = 0
	}
	for _, o := range outcomes {
		if o.Generation <= MaxGeneration {
			seen = max(seen, o.Generation)
		}
	}
	return seen
}
