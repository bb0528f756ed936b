package coordinatortest_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cbgrpc/cbgrpc/coordinator"
	"github.com/cbgrpc/cbgrpc/coordinator/coordinatortest"
	"github.com/cbgrpc/cbgrpc/coordinator/memory"
)

// lossy is a memory coordinator that can lose a scope's state as the
// contract allows: the scope restarts closed in generations that no earlier
// outcome or probe carries (each loss starts a new block of 2^32).
type lossy struct {
	m *memory.Coordinator

	mu     sync.Mutex
	epochs map[string]uint64
	// adopt, when set, makes a loss keep the old generations: the bug
	// Compare must catch.
	adopt bool
	// forgetEarly, when set, makes a scope restarted after a loss answer
	// in a new generation until its first write, and from then on in
	// generation 0 of a fresh scope, as if the new generation had been
	// forgotten at once, so that outcomes admitted under 0 before the loss
	// count again.
	forgetEarly bool
	written     map[string]bool // since the last loss
}

const epochSize = 1 << 32

func newLossy(clock func() time.Time) *lossy {
	return &lossy{m: memory.New(memory.WithClock(clock)), epochs: map[string]uint64{}, written: map[string]bool{}}
}

func (l *lossy) lose(scope string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.epochs[scope]++
	delete(l.written, scope)
}

// inner returns the memory scope that stands for scope and the offset of
// its generations; write says the operation is not a Snapshot.
func (l *lossy) inner(scope string, write bool) (string, uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	e := l.epochs[scope]
	if l.adopt || (l.forgetEarly && l.written[scope]) {
		return fmt.Sprintf("%d/%s", e, scope), 0
	}
	if write && e > 0 {
		l.written[scope] = true
	}
	return fmt.Sprintf("%d/%s", e, scope), e * epochSize
}

// in maps an outcome's generation into the current epoch; one of an
// earlier epoch maps to a generation the scope never reaches.
func in(gen, offset uint64) uint64 {
	if gen < offset {
		return ^uint64(0)
	}
	return gen - offset
}

func out(t *coordinator.Transition, scope string, offset uint64) *coordinator.Transition {
	if t == nil {
		return nil
	}
	c := *t
	c.Scope = scope
	c.Generation += offset
	return &c
}

func (l *lossy) Admit(ctx context.Context, scope string, p coordinator.Policy, claim string) (coordinator.Decision, error) {
	s, off := l.inner(scope, true)
	d, err := l.m.Admit(ctx, s, p, claim)
	d.Generation += off
	d.Transition = out(d.Transition, scope, off)
	return d, err
}

func (l *lossy) Record(ctx context.Context, scope string, p coordinator.Policy, outcomes []coordinator.Outcome) (coordinator.Result, error) {
	s, off := l.inner(scope, true)
	mapped := make([]coordinator.Outcome, len(outcomes))
	for i, o := range outcomes {
		o.Generation = in(o.Generation, off)
		mapped[i] = o
	}
	r, err := l.m.Record(ctx, s, p, mapped)
	r.Generation += off
	r.Transition = out(r.Transition, scope, off)
	return r, err
}

func (l *lossy) Settle(ctx context.Context, scope string, p coordinator.Policy, claim string, o coordinator.Outcome) (coordinator.Result, error) {
	s, off := l.inner(scope, true)
	o.Generation = in(o.Generation, off)
	r, err := l.m.Settle(ctx, s, p, claim, o)
	r.Generation += off
	r.Transition = out(r.Transition, scope, off)
	return r, err
}

func (l *lossy) Snapshot(ctx context.Context, scope string, p coordinator.Policy) (coordinator.Snapshot, error) {
	s, off := l.inner(scope, false)
	snap, err := l.m.Snapshot(ctx, s, p)
	snap.Scope = scope
	snap.Generation += off
	return snap, err
}

func loseState(t *testing.T, sut coordinator.Coordinator, scope string) {
	sut.(*lossy).lose(scope)
}

func TestCompareWithLostState(t *testing.T) {
	coordinatortest.Compare(t, func(t *testing.T, clock func() time.Time) coordinator.Coordinator {
		return newLossy(clock)
	}, coordinatortest.CompareOptions{LoseState: loseState})
}

// brokenCoordinators each break one rule in a way Compare must notice.
var brokenCoordinators = map[string]struct {
	opts coordinatortest.CompareOptions
	make func(clock func() time.Time) coordinator.Coordinator
}{
	// Keeps the generations of the lost state, so outcomes and probes of
	// calls admitted before the loss count again.
	"AdoptsOldOutcomesAfterLoss": {
		coordinatortest.CompareOptions{Seeds: 10, LoseState: loseState},
		func(clock func() time.Time) coordinator.Coordinator {
			l := newLossy(clock)
			l.adopt = true
			return l
		},
	},
	// Restarts a lost scope in a new generation, as it should, but forgets
	// that generation before a window has passed: Compare lets a restarted
	// generation be forgotten, and the calls lost before it go unchecked,
	// only where the reference would forget it.
	"ForgetsRestartedGenerationEarly": {
		coordinatortest.CompareOptions{Seeds: 10, LoseState: loseState},
		func(clock func() time.Time) coordinator.Coordinator {
			l := newLossy(clock)
			l.forgetEarly = true
			return l
		},
	},
	"SeesTimeOneMillisecondLate": {
		coordinatortest.CompareOptions{Seeds: 10},
		func(clock func() time.Time) coordinator.Coordinator {
			return memory.New(memory.WithClock(func() time.Time { return clock().Add(-time.Millisecond) }))
		},
	},
	"CountsEveryOutcomeTwice": {
		coordinatortest.CompareOptions{Seeds: 10},
		func(clock func() time.Time) coordinator.Coordinator {
			return doubler{memory.New(memory.WithClock(clock))}
		},
	},
}

type doubler struct{ *memory.Coordinator }

func (d doubler) Record(ctx context.Context, scope string, p coordinator.Policy, outcomes []coordinator.Outcome) (coordinator.Result, error) {
	return d.Coordinator.Record(ctx, scope, p, append(outcomes, outcomes...))
}

// TestCompareCatchesBrokenCoordinators runs Compare on each broken
// coordinator in a child process and wants it to fail there.
func TestCompareCatchesBrokenCoordinators(t *testing.T) {
	if name := os.Getenv("COORDINATORTEST_BROKEN"); name != "" {
		b := brokenCoordinators[name]
		coordinatortest.Compare(t, func(t *testing.T, clock func() time.Time) coordinator.Coordinator {
			return b.make(clock)
		}, b.opts)
		return
	}
	if testing.Short() {
		t.Skip("runs child processes")
	}
	for name := range brokenCoordinators {
		t.Run(name, func(t *testing.T) {
			cmd := exec.Command(os.Args[0], "-test.run=^TestCompareCatchesBrokenCoordinators$", "-test.count=1")
			cmd.Env = append(os.Environ(), "COORDINATORTEST_BROKEN="+name)
			out, err := cmd.CombinedOutput()
			if err == nil {
				t.Fatalf("Compare passed a coordinator that %s:\n%s", name, out)
			}
			if !strings.Contains(string(out), "coordinator under test") {
				t.Errorf("Compare failed without showing a difference:\n%s", out)
			}
		})
	}
}
