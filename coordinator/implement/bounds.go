package implement

// What a scope's state keeps is bounded by constants, so that what a scope
// costs does not grow with its traffic, its fleet or its history.

// RecentBatches is how many batch IDs a coordinator remembers per scope
// (coordinator.RecordRequest.BatchID). A retry follows its first attempt
// within a round trip or two, so a short memory suffices and keeps a
// scope's state O(Buckets + Probes).
const RecentBatches = 64

// RecentPolicies is how many policies a coordinator keeps per scope for
// Snapshot.Policies: the newest, of the last window. A fleet runs one
// policy, two during a rollout; more is a fleet out of step, and keeping
// the rest would only let a scope's state grow with the number of
// releases.
const RecentPolicies = 16

// TrackedReplicas is how many replicas a coordinator keeps per scope to
// attribute failures and slow calls to: the ones that contribute most,
// outliers first. What a scope costs stays bounded by a constant, however
// many replicas a fleet has; a fleet with more failing replicas than this
// is failing broadly, and the fleet's counts, which every outcome reaches,
// decide it.
const TrackedReplicas = 16

// Markedly is how many times the rest of the fleet's share of failures
// (or slow calls) a replica's must be for it to be an outlier: a fleet
// failing alike never finds one, whatever a replica's own run.
const Markedly = 2
