// Package memory is an in-process [coordinator.Coordinator]: the breaker
// contract for one process, for tests, for the examples, and as the
// reference model the Redis coordinator is compared with.
//
// Start with [New]; inject a clock with [WithClock] in tests. A Coordinator
// is safe for concurrent use. It keeps O(Buckets + Probes) per scope.
//
// A scope is born by its first operation other than Snapshot, closed, in
// the generation [implement.NextGeneration] mints. A closed scope is
// forgotten a window after its last write (its birth, closing, enabling
// or an outcome counted); other states are kept. Snapshot and List read a
// forgotten scope as not born, and its next write gives birth to it again,
// above every generation it had, so that the outcome of a call admitted
// before is never counted after. Its memory goes at the next sweep, which
// comes with the first operation on any scope once as many operations as
// scopes held, or a window of that operation's policy, have passed since
// the last: memory follows the scopes in use, however few calls there
// are. There is no goroutine: with no operation at all, nothing is swept.
package memory
