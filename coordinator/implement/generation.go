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
// stays below it until the year 2255.
const MaxGeneration = 1<<53 - 1
