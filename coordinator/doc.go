// Package coordinator defines the contract between the cbgrpc Breaker and the
// shared state behind it: a [Coordinator] runs each breaker operation (admit a
// call, record outcomes, settle a probe, look at a scope) as one atomic step
// on state that every replica of a service shares.
//
// The package holds the vocabulary of that contract: [Policy] (what trips a
// breaker and how it recovers), [Decision], [Outcome], [Result], [Transition]
// and [Snapshot], and the request of each operation ([AdmitRequest],
// [RecordRequest], ...), which carries every input a coordinator must
// honour. Implementations live in the sub-packages memory (one process) and
// redis (a fleet), and share what the contract does not state in
// coordinator/implement; coordinatortest checks that an implementation
// keeps the contract.
//
// The rules, in short: a closed breaker admits every call and counts outcomes
// in a sliding window of time buckets; when a rule of the [Policy] holds it
// opens, and rejects calls until its open period ends. The first admission
// after that moves it to half-open and claims one of Policy.Probes leased
// probe slots; enough successful probes close it, a failed probe opens it
// again. Every transition to open or closed starts a new generation
// (implement.NextGeneration: above every generation the scope ever had,
// whatever was lost or forgotten in between), and an outcome carries the
// generation it was admitted under, so outcomes of an earlier generation
// never count.
//
// Every Record carries the replica it comes from ([RecordRequest]): a rule
// trips the breaker for the fleet only if it still holds without the
// Policy.Outliers replicas that contribute most to it, and a replica
// failing alone is an [Outlier], which rejects its own calls for an open
// period (docs/architecture.md has the rules).
//
// Optional interfaces add to that: [Watcher] (a feed of transitions, and
// with [PolicyWatch] of policy changes), [Controller] (operators force a
// breaker's state, and store an [Override] of the policy for one scope or
// a fleet default, which Breakers lay over their code's policy), [Lister],
// [Pusher], and [Checker] (a start-up check) with [ErrorKinds] (the kind of
// cause of an error, for telemetry). Every Record carries its policy, so that a [Snapshot]
// tells which policies the replicas run (Snapshot.Policies, by
// [Policy.Fingerprint]); and a window keeps the layout it was written
// with, so a change of Policy.Window or Policy.Buckets re-lays it without
// losing or double-counting an outcome.
package coordinator
