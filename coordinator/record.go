package coordinator

// RecordRequest is everything a Record takes. Every input a coordinator
// must honour is a field here, not a value in the context, so that a
// coordinator written elsewhere cannot miss one.
type RecordRequest struct {
	Scope  string
	Policy Policy
	// Outcomes are the outcomes of calls admitted with Allow, in the order
	// the calls ended.
	Outcomes []Outcome
	// Replica names the replica of the service whose calls the outcomes
	// are: the coordinator attributes failures and slow calls to it, so
	// that one replica failing alone does not trip the breaker for the
	// fleet (Policy.Outliers), and says in Result.Outlier whether it is
	// an outlier. Callers that are one process may leave it empty: "" is
	// one replica like any other.
	Replica string
	// BatchID, when set, names the batch: a coordinator remembers a
	// scope's last [RecentBatches] IDs and treats a Record with a
	// remembered ID as a retry, all of its outcomes stale. Send a retried
	// batch with the same ID so that it cannot count twice.
	BatchID string
	// Source says where Policy came from, which the coordinator reports
	// with it (Snapshot.Policies).
	Source PolicySource
}
