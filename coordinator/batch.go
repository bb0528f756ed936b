package coordinator

// RecentBatches is how many batch IDs a coordinator remembers per scope
// (RecordRequest.BatchID). A retry follows its first attempt within a
// round trip or two, so a short memory suffices and keeps a scope's state
// O(Buckets + Probes).
const RecentBatches = 64
