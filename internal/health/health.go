// Package health is what a Breaker's process knows of its coordinator
// itself, apart from what the coordinator says of scopes: whether it
// works, the back-off after an admission's error, and which kinds of
// failure were already reported. After an error, calls decide without the
// coordinator for the back-off, then one call at a time asks again; from
// the error until a call succeeds, nothing is answered from the Breaker's
// table either: Records are failing too, and a trip could go unheard.
package health

import (
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cbgrpc/cbgrpc/coordinator"
)

// Status is the health of one Breaker's coordinator. Its zero value is a
// working coordinator with no back-off; it is safe for concurrent use.
type Status struct {
	backoff time.Duration
	// downUntil is when calls may ask again (UnixNano; 0 while the
	// coordinator works). trying lets one call ask after the back-off,
	// while the others keep deciding without it.
	downUntil atomic.Int64
	trying    atomic.Bool
	failing   atomic.Bool

	// told holds the kinds of failure reported since the coordinator
	// last worked (Complain).
	mu   sync.Mutex
	told map[string]bool
}

// New returns the status of a working coordinator whose admission errors
// start a back-off of backoff.
func New(backoff time.Duration) *Status { return &Status{backoff: backoff} }

// MayAsk reports whether a call may ask the coordinator: yes while it
// works; during the back-off no; after it, one call at a time.
func (h *Status) MayAsk() bool {
	until := h.downUntil.Load()
	if until == 0 {
		return true
	}
	if time.Now().UnixNano() < until {
		return false
	}
	return h.trying.CompareAndSwap(false, true)
}

// InBackoff reports whether calls are deciding without the coordinator.
func (h *Status) InBackoff() bool {
	until := h.downUntil.Load()
	return until != 0 && time.Now().UnixNano() < until
}

// BackoffLeft is what is left of the back-off; 0: none.
func (h *Status) BackoffLeft() time.Duration {
	until := h.downUntil.Load()
	if until == 0 {
		return 0
	}
	return max(0, time.Until(time.Unix(0, until)))
}

// Down reports whether an admission's error started a back-off that no
// answer has ended yet (though the back-off itself may be over).
func (h *Status) Down() bool { return h.downUntil.Load() != 0 }

// Trusted reports whether answers kept in the table may decide calls:
// not from a coordinator error until a call succeeds again.
func (h *Status) Trusted() bool { return !h.failing.Load() }

// Failed notes a coordinator error, unless the error concerns one scope's
// data only: the coordinator works for the others, so that scope alone is
// undecidable. An admission's error also starts the back-off, which
// spares the following calls the timeout; the error of a Record, a Settle
// or an operator's command costs no call any time, and does not: the next
// admission finds out for itself, rather than let a whole back-off of
// calls through by the failure policy because one Record was slow.
func (h *Status) Failed(err error, admission bool) {
	h.trying.Store(false)
	if errors.Is(err, coordinator.ErrCorruptState) {
		return
	}
	h.failing.Store(true)
	if admission {
		h.downUntil.Store(time.Now().Add(h.backoff).UnixNano())
	}
}

// Succeeded ends a back-off: the coordinator answered. The kinds of
// failure reported are forgotten.
func (h *Status) Succeeded() {
	if h.downUntil.Load() != 0 {
		h.downUntil.Store(0)
	}
	if h.failing.Load() {
		h.failing.Store(false)
		h.mu.Lock()
		clear(h.told)
		h.mu.Unlock()
	}
	h.trying.Store(false)
}

// Abandoned is a call whose caller gave up before the coordinator
// answered: the coordinator is not to blame, and another call may try.
func (h *Status) Abandoned() { h.trying.Store(false) }

// Complain reports whether a failure of kind is the first of its kind
// since the coordinator last worked, and notes it: each kind is reported
// once, not per call.
func (h *Status) Complain(kind string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.told[kind] {
		return false
	}
	if h.told == nil {
		h.told = make(map[string]bool)
	}
	h.told[kind] = true
	return true
}
