// Package memory is an in-process [coordinator.Coordinator]: the breaker
// contract for one process, for tests, for the examples, and as the
// reference model the Redis coordinator is compared with.
//
// Start with [New]; inject a clock with [WithClock] in tests. A Coordinator
// is safe for concurrent use. It keeps O(Buckets + Probes) per scope and
// forgets a scope that is closed and has had no outcome for a whole window.
package memory
