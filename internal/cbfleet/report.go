package cbfleet

// Report is one line of a replica's output.
type Report struct {
	Event string `json:"event"` // "ready", "tick", "phase" (a phase ended), "policy" (Policies changed), "closed"
	ID    int    `json:"id"`
	Phase string `json:"phase"`
	MS    int64  `json:"ms"` // since the phase started
	At    int64  `json:"at"` // when the report was made, Unix ms (the machine's clock, which tests share)

	// Calls of this phase that ended, by result: OK, rejected by the
	// breaker (errors.Is ErrOpen), or failed otherwise.
	Calls    int64                   `json:"calls"`
	OK       int64                   `json:"ok"`
	Rejected int64                   `json:"rejected"`
	Errors   int64                   `json:"errors"`
	Methods  map[string]*MethodCount `json:"methods"`
	InFlight int64                   `json:"in_flight"`
	Idle     bool                    `json:"idle"` // no call in flight and none left to make

	// Latency of the calls of this phase, in microseconds; the
	// percentiles only in "phase" and "closed" reports.
	MaxUS int64 `json:"max_us"`
	P50US int64 `json:"p50_us,omitempty"`
	P99US int64 `json:"p99_us,omitempty"`

	// From the Breaker's metrics, since the process started.
	Dropped   int64            `json:"dropped"`
	DroppedBy map[string]int64 `json:"dropped_by,omitempty"` // by reason
	Decisions map[string]int64 `json:"decisions,omitempty"`  // "verdict/decided_by"
	CoordErrs int64            `json:"coordinator_errors"`
	// FeedLosses counts the times the transition feed could not be opened
	// or broke (cbgrpc.feed.losses).
	FeedLosses int64 `json:"feed_losses"`
	// CoordErrsBy counts them by "operation/kind" (kind: timeout, error, ...).
	CoordErrsBy map[string]int64 `json:"coordinator_errors_by,omitempty"`

	Goroutines int `json:"goroutines"`

	// Policies are what the Breaker runs each method's scope on, as
	// "fingerprint source" (cbgrpc.Breaker.Policy).
	Policies map[string]string `json:"policies,omitempty"`

	CloseMS  int64  `json:"close_ms,omitempty"` // "closed": how long Breaker.Close took
	CloseErr string `json:"close_error,omitempty"`
	Err      string `json:"error,omitempty"` // the first error of each kind, for the test log
}

// MethodCount is the calls of one method in a phase.
type MethodCount struct {
	Calls    int64 `json:"calls"`
	OK       int64 `json:"ok"`
	Rejected int64 `json:"rejected"`
	Errors   int64 `json:"errors"`
	// Streak is how many of its latest calls were rejected in a row.
	Streak int64 `json:"streak"`
}
