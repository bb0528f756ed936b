package coordinator

import "time"

// The requests of the operations that write. Every input a coordinator
// must honour is a field of its request, not a value in the context, so
// that a coordinator written elsewhere cannot miss one.
//
// Each has a Seen field: the highest generation of its scope that the
// caller has learned from this coordinator, from an answer or from the
// transition feed (0 says nothing). A coordinator whose stored generation
// is lower, or lower than that of an outcome it is given, has lost state
// that it once acknowledged: a failover that promoted a replica the trip
// had not reached, a restore from a backup. It treats the scope as not
// born and gives birth to it above the seen generation before it answers,
// so that no generation handed out before the loss is handed out again,
// and outcomes admitted before it stay stale (package implement has the
// rule, Seen and NextGeneration).

// AdmitRequest is everything an Admit takes.
type AdmitRequest struct {
	Scope  string
	Policy Policy
	// Claim is a unique ID the caller makes for one logical admission: an
	// Admit of a claim that holds a probe slot takes no second one, and
	// its probe is settled with the same claim.
	Claim string
	Seen  uint64
}

// RecordRequest is everything a Record takes.
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
	// scope's last IDs (implement.RecentBatches) and treats a Record with a
	// remembered ID as a retry, all of its outcomes stale. Send a retried
	// batch with the same ID so that it cannot count twice.
	BatchID string
	// Source says where Policy came from, which the coordinator reports
	// with it (Snapshot.Policies).
	Source PolicySource
	Seen   uint64
}

// SettleRequest is everything a Settle takes.
type SettleRequest struct {
	Scope   string
	Policy  Policy
	Claim   string  // the claim the probe was admitted with
	Outcome Outcome // the probe's outcome
	Seen    uint64
}

// PushRequest is everything a [Pusher.Push] takes.
type PushRequest struct {
	Scope  string
	Policy Policy
	// Generation is the generation the pushed-back call was admitted
	// under.
	Generation uint64
	// Period is how long the server asked callers to stay away; 0 or less
	// asks for the longest open period the policy allows.
	Period time.Duration
	// Reason is the transition's, for operators; required.
	Reason string
	Seen   uint64
}

// CommandRequest is everything an operator's command of a [Controller]
// (Isolate, Release, Disable, Enable) takes.
type CommandRequest struct {
	Scope  string
	Policy Policy
	Note   Note
	Seen   uint64
}
