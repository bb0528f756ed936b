package implement

import "time"

// NextGeneration is the generation a scope moves to at now when the
// highest generation its surviving data knows is prev (0 if none):
//
//	max(prev + 1, now in Unix milliseconds × 1000)
//
// Every coordinator mints every new generation with it: a transition to
// open, closed, isolated or disabled, and the birth of a scope. A scope is
// born by its first Admit, Record, Settle or [coordinator.Controller]
// command after it was forgotten (its closed state outlived its window),
// after its state record was lost (eviction, a deleted key) or rolled back
// (a caller has seen a later generation: [Seen]), or ever; that operation
// persists the new generation. Snapshot never gives birth: a scope that is
// not born reads generation 0, which is never handed out.
//
// So generations only grow, and are never handed out twice for one scope,
// whatever happens to the stored state: a scope forgotten and born again,
// a lost state record, or a failover that rolled the data back all start
// above every generation minted before on any clock that has not gone
// back. An outcome admitted under an old generation stays stale however
// long its call takes. A thousand generations fit in one millisecond
// before the rule borrows from the next one; the values stay below 2^53
// (exact in a double, as in Redis's Lua) until the year 2255.
func NextGeneration(prev uint64, now time.Time) uint64 {
	return max(prev+1, uint64(max(now.UnixMilli(), 0))*1000)
}

// MaxGeneration bounds the generations coordinators hand out: integers a
// double holds exactly (Redis's Lua computes with doubles). NextGeneration
// stays below it until the year 2255, on a clock that is right; a
// coordinator refuses to mint past it rather than hand one out twice.
const MaxGeneration = 1<<53 - 1

// SeenAhead is how far ahead of a coordinator's clock a generation a
// caller has seen may lie (the Seen of a request, an outcome's
// generation): a generation is minted from a coordinator's clock, so one
// further ahead was never handed out (a forged message, junk), and
// believing it would move the scope's generations up to where
// NextGeneration cannot go on. A day covers a failover to a server whose
// clock runs behind.
const SeenAhead = 24 * time.Hour

// Credible is seen, what a caller has seen of a scope (see [Seen]), if a
// coordinator whose clock reads now could have handed it out; else 0, as
// if the caller had seen nothing.
func Credible(seen uint64, now time.Time) uint64 {
	if seen > NextGeneration(0, now.Add(SeenAhead)) {
		return 0
	}
	return seen
}
