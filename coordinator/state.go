package coordinator

import "strconv"

// State is the state of one breaker.
type State int

const (
	// StateClosed admits every call and counts outcomes.
	StateClosed State = iota
	// StateOpen rejects every call until its open period ends.
	StateOpen
	// StateHalfOpen admits a limited number of probe calls.
	StateHalfOpen
	// StateIsolated is forced open by an operator (see [Controller]): it
	// rejects every call and sends no probes until released.
	StateIsolated
	// StateDisabled is forced closed by an operator: it admits every call
	// and counts outcomes, but no rule trips it until it is enabled.
	StateDisabled
)

func (s State) String() string {
	switch s {
	case StateClosed:
		return "closed"
	case StateOpen:
		return "open"
	case StateHalfOpen:
		return "half-open"
	case StateIsolated:
		return "isolated"
	case StateDisabled:
		return "disabled"
	}
	return "State(" + strconv.Itoa(int(s)) + ")"
}

// Verdict is what an admission decided.
type Verdict int

const (
	// Allow lets a call through while the breaker is closed; its outcome
	// goes to Record.
	Allow Verdict = iota
	// Probe lets a call through as a half-open probe; its outcome goes to
	// Settle with the same claim.
	Probe
	// Reject refuses the call.
	Reject
)

func (v Verdict) String() string {
	switch v {
	case Allow:
		return "allow"
	case Probe:
		return "probe"
	case Reject:
		return "reject"
	}
	return "Verdict(" + strconv.Itoa(int(v)) + ")"
}
