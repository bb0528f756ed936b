package coordinator

import "context"

type batchKey struct{}

// WithBatchID marks a Record call with the ID of its batch of outcomes. A
// coordinator remembers the last [RecentBatches] IDs of a scope and treats a
// Record with a remembered ID as a retry: all its outcomes are stale. Send a
// retried batch with the same ID so that it cannot count twice.
func WithBatchID(ctx context.Context, id string) context.Context {
	return context.WithValue(ctx, batchKey{}, id)
}

// BatchID returns the batch ID set by [WithBatchID], or "".
func BatchID(ctx context.Context) string {
	id, _ := ctx.Value(batchKey{}).(string)
	return id
}

// RecentBatches is how many batch IDs a coordinator remembers per scope.
// A retry follows its first attempt within a round trip or two, so a short
// memory suffices and keeps a scope's state O(Buckets + Probes).
const RecentBatches = 64
