package cbgrpc

import (
	"context"
	"fmt"
	"time"

	"github.com/cbgrpc/cbgrpc/coordinator"
)

// A replica whose own calls of a scope fail in a row as many times as
// makes it an outlier, or trips the breaker (verdictAt), would go on
// calling while the Record that says so travels: calling faster than one
// call per round trip, it would fail more calls than the rules allow. So
// the calls it makes after that failure wait for the coordinator's answer
// to the Record that carries it, at most the coordinator timeout, and are
// then decided by what the coordinator said. It is the coordinator's
// verdict they wait for: nothing is decided here. Once per run; a success
// ends the run.

// verdict is the answer a replica's calls of a scope wait for: done is
// closed once the Record carrying the failure that made the run long
// enough has returned (or was dropped), its answer learned.
type verdict struct {
	done chan struct{}
	row  *known
}

// verdictAt is the run of this replica's own failures after which its
// calls wait for the coordinator's verdict: the run that trips p's rules
// by itself (ConsecutiveFailures, or MinCalls failures when that rule is
// off); 0: none.
func verdictAt(p coordinator.Policy) int64 {
	if p.ConsecutiveFailures > 0 {
		return int64(p.ConsecutiveFailures)
	}
	if p.FailureRatio > 0 {
		return int64(max(p.MinCalls, 1))
	}
	return 0
}

// failed notes that a call of scope failed: the scope's next admission asks the coordinator (a failure may
// be the start of a trip whose news is on its way), and the failure
// counts in this replica's run. The failure that makes the run verdictAt
// long returns the verdict for its Record to release; any other, nil.
func (k *knowledge) failed(scope string) *verdict {
	var into *fact
	if v, ok := k.index.Load(scope); ok {
		if f := v.(*known).current(); admitsAll(f.state) && !f.checked.IsZero() {
			into = new(fact) // before the lock (publish)
		}
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	e := k.scopes[scope]
	if e == nil {
		return nil
	}
	if admitsAll(e.state) && !e.checked.IsZero() {
		e.checked = 0
		if into == nil {
			into = new(fact)
		}
		e.publish(into)
	}
	if e.run.Add(1) != verdictAt(k.policyIn(&e.fact).p) || e.verdict.Load() != nil {
		return nil
	}
	v := &verdict{done: make(chan struct{}), row: e}
	e.verdict.Store(v)
	return v
}

// succeeded ends this replica's run of failures in row (nil: none).
func (e *known) succeeded() {
	if e != nil && e.run.Load() != 0 {
		e.run.Store(0)
	}
}

// release lets the calls waiting for v go (nil: none).
func (v *verdict) release() {
	if v == nil {
		return
	}
	v.row.verdict.CompareAndSwap(v, nil)
	close(v.done)
}

// errNoVerdict is why a call decides without the coordinator when the
// verdict it waited for took its whole wait: the coordinator did not
// answer a Record within the timeout.
var errNoVerdict = fmt.Errorf("cbgrpc: no verdict within the coordinator timeout: %w", context.DeadlineExceeded)

// awaitVerdict waits, for a call of a scope, until the verdict pending
// in row (nil: none) is in, ctx is done or the coordinator timeout has
// passed. It reports whether it waited.
func (b *Breaker) awaitVerdict(ctx context.Context, row *known) bool {
	// A dry-run replica rejects nothing, so a verdict changes nothing of
	// its calls.
	if row == nil || b.cfg.dryRun {
		return false
	}
	v := row.verdict.Load()
	if v == nil {
		return false
	}
	t := time.NewTimer(b.cfg.timeout)
	defer t.Stop()
	select {
	case <-v.done:
	case <-t.C:
		// Given up on: the calls after this one do not wait for it.
		row.verdict.CompareAndSwap(v, nil)
	case <-ctx.Done():
	}
	return true
}
