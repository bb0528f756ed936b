package coordinator

// Bounded is implemented by a coordinator that can say whether its calls
// honour their context: return soon after the context is done, whatever
// the network does. A caller that bounds how long it waits for the
// coordinator (the Breaker's coordinator timeout) can then make the call
// itself. Otherwise it must wait for the call in another goroutine and
// stop waiting at the deadline, leaving the call to finish on its own,
// which costs a goroutine and a hand-off between two per call.
type Bounded interface {
	// HonoursDeadlines reports whether every call returns soon after its
	// context is done.
	HonoursDeadlines() bool
}
