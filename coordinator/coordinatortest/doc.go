// Package coordinatortest checks that a [coordinator.Coordinator] keeps the
// breaker contract, in the style of testing/fstest.TestFS.
//
// Call [Run] from a test of the implementation with a [Factory] that makes
// a coordinator reading time from the clock it is given:
//
//	func TestConformance(t *testing.T) {
//		coordinatortest.Run(t, func(t *testing.T, clock func() time.Time) coordinator.Coordinator {
//			return memory.New(memory.WithClock(clock))
//		})
//	}
//
// The contract's rules are numbered in the repository's
// docs/architecture.md ("The contract's rules"); "rule N" in this package
// and in the coordinators is that list's. Run has one named subtest per
// rule of the contract, each on its own
// coordinator and fake [Clock], and ends with [Compare], a randomized
// differential test against the in-process coordinator, the reference
// model. A coordinator that can lose its state record calls Compare itself
// with [CompareOptions].LoseState set. The subtests never write a
// generation down: they take it from an answer and
// [implement.NextGeneration].
//
// [Clock] is the one fake clock of this module's tests.
package coordinatortest
