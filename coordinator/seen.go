package coordinator

// Every write (Admit, Record, Settle, Push, a [Controller] command) takes
// in its request the highest generation of its scope that the caller has
// learned from this coordinator, from an answer or from the transition
// feed: its Seen field. A 0 says nothing.
//
// A coordinator whose stored generation is lower has lost state that it
// once acknowledged: a failover that promoted a replica the trip had not
// reached, a restore from a backup. It treats the scope as not born and
// gives birth to it above the seen generation before it answers (see
// [NextGeneration]), so that no generation handed out before the loss is
// handed out again, and outcomes admitted before it stay stale. An
// outcome's generation, which the coordinator handed out, is seen too.

// Seen returns the highest of seen and the generations of outcomes: an
// outcome carries the generation its call was admitted under, which the
// coordinator handed out. A value above [MaxGeneration] is no generation
// a coordinator hands out, and counts for nothing. Coordinators call Seen
// to apply the rule of a request's Seen field.
func Seen(seen uint64, outcomes ...Outcome) uint64 {
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
