package coordinator

import (
	"errors"
	"fmt"
)

// ErrInvalidScope is wrapped by the error of every operation that would
// store state for a scope no call can have. That is the empty scope: a
// Breaker leaves a call whose scope is empty unprotected, so state stored
// for it (an isolation, which never ends by itself, or an override) would
// be kept for good and used by nothing.
var ErrInvalidScope = errors.New("invalid scope")

// errEmptyScope says why the empty scope is refused.
var errEmptyScope = fmt.Errorf("%w: the scope is empty: no call has it (a Breaker leaves a call whose scope is empty unprotected)", ErrInvalidScope)

// CheckScope reports whether an operation may store state for scope:
// every scope but the empty one. Coordinators call it before every
// operation that writes (Admit, Record, Settle, Push, the [Controller]'s
// commands, an override of a scope); Snapshot, which writes nothing,
// reads the empty scope as not born.
func CheckScope(scope string) error {
	if scope == "" {
		return errEmptyScope
	}
	return nil
}
