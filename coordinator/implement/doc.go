// Package implement holds what a [coordinator.Coordinator] implementation
// needs beyond the contract that package coordinator states: the rule that
// mints generations ([NextGeneration]) and the one that fences a
// coordinator that lost state ([Seen]), ratios as integers ([Permille]),
// the bounds on what a scope keeps ([RecentBatches], [RecentPolicies],
// [TrackedReplicas]), the open period of a push ([PushPeriod]), the checks
// of what an operation is given ([CheckOverride], [CheckPushReason]) and
// the reasons its transitions carry ([Describe], [IsolationEnded]).
//
// Both coordinators of this module (memory and redis) use it; a coordinator
// written elsewhere uses it to keep the contract the way
// coordinatortest checks it. A caller of a coordinator never needs it.
package implement
