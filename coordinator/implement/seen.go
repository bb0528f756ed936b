package implement

import "github.com/cbgrpc/cbgrpc/coordinator"

// Seen returns the highest of seen, a request's Seen field, and the
// generations of outcomes: an outcome carries the generation its call was
// admitted under, which the coordinator handed out. A value above
// [MaxGeneration] is no generation a coordinator hands out, and counts for
// nothing. A coordinator whose stored generation is below what Seen returns
// lost state, and gives birth to the scope above it (see [NextGeneration]).
func Seen(seen uint64, outcomes ...coordinator.Outcome) uint64 {
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
