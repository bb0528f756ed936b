package coordinatortest_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cbgrpc/cbgrpc/coordinator"
	"github.com/cbgrpc/cbgrpc/coordinator/coordinatortest"
	"github.com/cbgrpc/cbgrpc/coordinator/memory"
)

// lossy is a memory coordinator that can lose a scope's state: a loss
// moves the scope to a fresh scope of the inner coordinator, window and
// all, where the next write gives birth to it (Compare moves the clock
// past every generation minted before the loss).
type lossy struct {
	m *memory.Coordinator

	mu     sync.Mutex
	losses map[string]int
	// adopt, when set, makes a scope born after a loss count the outcomes
	// of the generation it had when it lost its state: the bug Compare
	// must catch. before holds that generation, per scope.
	adopt  bool
	before map[string]uint64
}

func newLossy(clock func() time.Time) *lossy {
	return &lossy{m: memory.New(memory.WithClock(clock)), losses: map[string]int{}, before: map[string]uint64{}}
}

func loseState(t *testing.T, sut coordinator.Coordinator, scope string) {
	l := sut.(*lossy)
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.adopt {
		// Any valid policy reads the generation.
		s, err := l.m.Snapshot(t.Context(), l.innerLocked(scope), coordinator.DefaultPolicy())
		if err != nil {
			t.Fatal(err)
		}
		l.before[scope] = s.Generation
	}
	l.losses[scope]++
}

// inner is the scope of the inner coordinator that stands for scope.
func (l *lossy) inner(scope string) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.innerLocked(scope)
}

func (l *lossy) innerLocked(scope string) string { return fmt.Sprintf("%d/%s", l.losses[scope], scope) }

func renamed(t *coordinator.Transition, scope string) *coordinator.Transition {
	if t == nil {
		return nil
	}
	c := *t
	c.Scope = scope
	return &c
}

func (l *lossy) Admit(ctx context.Context, q coordinator.AdmitRequest) (coordinator.Decision, error) {
	scope := q.Scope
	q.Scope = l.inner(scope)
	d, err := l.m.Admit(ctx, q)
	d.Transition = renamed(d.Transition, scope)
	return d, err
}

func (l *lossy) Record(ctx context.Context, q coordinator.RecordRequest) (coordinator.Result, error) {
	scope := q.Scope
	q.Scope = l.inner(scope)
	if l.adopt {
		q.Outcomes = l.adopted(ctx, scope, q.Scope, q.Policy, q.Outcomes)
	}
	r, err := l.m.Record(ctx, q)
	r.Transition = renamed(r.Transition, scope)
	return r, err
}

// adopted moves the outcomes of the generation scope had when it lost its
// state into the generation it was born in after.
func (l *lossy) adopted(ctx context.Context, scope, inner string, p coordinator.Policy, outcomes []coordinator.Outcome) []coordinator.Outcome {
	l.mu.Lock()
	old := l.before[scope]
	l.mu.Unlock()
	s, err := l.m.Snapshot(ctx, inner, p)
	if old == 0 || err != nil || s.Generation == 0 {
		return outcomes
	}
	outcomes = slices.Clone(outcomes)
	for i := range outcomes {
		if outcomes[i].Generation == old {
			outcomes[i].Generation = s.Generation
		}
	}
	return outcomes
}

func (l *lossy) Settle(ctx context.Context, q coordinator.SettleRequest) (coordinator.Result, error) {
	scope := q.Scope
	q.Scope = l.inner(scope)
	r, err := l.m.Settle(ctx, q)
	r.Transition = renamed(r.Transition, scope)
	return r, err
}

func (l *lossy) Snapshot(ctx context.Context, scope string, p coordinator.Policy) (coordinator.Snapshot, error) {
	s, err := l.m.Snapshot(ctx, l.inner(scope), p)
	s.Scope = scope
	return s, err
}

type command func(context.Context, coordinator.CommandRequest) (coordinator.Result, error)

func (l *lossy) control(ctx context.Context, c command, q coordinator.CommandRequest) (coordinator.Result, error) {
	scope := q.Scope
	q.Scope = l.inner(scope)
	r, err := c(ctx, q)
	r.Transition = renamed(r.Transition, scope)
	return r, err
}

func (l *lossy) Isolate(ctx context.Context, q coordinator.CommandRequest) (coordinator.Result, error) {
	return l.control(ctx, l.m.Isolate, q)
}

func (l *lossy) Release(ctx context.Context, q coordinator.CommandRequest) (coordinator.Result, error) {
	return l.control(ctx, l.m.Release, q)
}

func (l *lossy) Disable(ctx context.Context, q coordinator.CommandRequest) (coordinator.Result, error) {
	return l.control(ctx, l.m.Disable, q)
}

func (l *lossy) Enable(ctx context.Context, q coordinator.CommandRequest) (coordinator.Result, error) {
	return l.control(ctx, l.m.Enable, q)
}

func TestCompareWithLostState(t *testing.T) {
	coordinatortest.Compare(t, func(t *testing.T, clock func() time.Time) coordinator.Coordinator {
		return newLossy(clock)
	}, coordinatortest.CompareOptions{LoseState: loseState})
}

// reborn is a memory coordinator that hands a generation out twice: a
// scope born again after it was forgotten answers in the generation it was
// first born in, so outcomes of calls admitted back then count again.
type reborn struct {
	coordinator.Coordinator // not a Controller: its commands would hide births

	mu sync.Mutex
	// Per scope: the first generation handed out, the last one, and the
	// inner generation of its latest birth after forgetting.
	first, last, again map[string]uint64
}

// out is the generation reborn answers for the inner gen; an answer of an
// operation that writes (with its transition t) teaches it the births.
func (r *reborn) out(scope string, gen uint64, write bool, t *coordinator.Transition) uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	if write {
		if r.first[scope] == 0 {
			r.first[scope] = gen
		} else if gen != r.last[scope] && t == nil {
			r.again[scope] = gen
		}
		r.last[scope] = gen
	}
	if gen != 0 && gen == r.again[scope] {
		return r.first[scope]
	}
	return gen
}

func (r *reborn) in(scope string, gen uint64) uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	if a := r.again[scope]; a != 0 && gen == r.first[scope] {
		return a
	}
	return gen
}

func (r *reborn) Admit(ctx context.Context, q coordinator.AdmitRequest) (coordinator.Decision, error) {
	d, err := r.Coordinator.Admit(ctx, q)
	d.Generation = r.out(q.Scope, d.Generation, true, d.Transition)
	return d, err
}

func (r *reborn) Record(ctx context.Context, q coordinator.RecordRequest) (coordinator.Result, error) {
	q.Outcomes = slices.Clone(q.Outcomes)
	for i := range q.Outcomes {
		q.Outcomes[i].Generation = r.in(q.Scope, q.Outcomes[i].Generation)
	}
	res, err := r.Coordinator.Record(ctx, q)
	res.Generation = r.out(q.Scope, res.Generation, true, res.Transition)
	return res, err
}

func (r *reborn) Settle(ctx context.Context, q coordinator.SettleRequest) (coordinator.Result, error) {
	q.Outcome.Generation = r.in(q.Scope, q.Outcome.Generation)
	res, err := r.Coordinator.Settle(ctx, q)
	res.Generation = r.out(q.Scope, res.Generation, true, res.Transition)
	return res, err
}

func (r *reborn) Snapshot(ctx context.Context, scope string, p coordinator.Policy) (coordinator.Snapshot, error) {
	s, err := r.Coordinator.Snapshot(ctx, scope, p)
	s.Generation = r.out(scope, s.Generation, false, nil)
	return s, err
}

type doubler struct{ *memory.Coordinator }

func (d doubler) Record(ctx context.Context, q coordinator.RecordRequest) (coordinator.Result, error) {
	q.Outcomes = append(q.Outcomes, q.Outcomes...)
	return d.Coordinator.Record(ctx, q)
}

// brokenCoordinators each break one rule in a way Compare must notice.
var brokenCoordinators = map[string]struct {
	opts coordinatortest.CompareOptions
	make func(clock func() time.Time) coordinator.Coordinator
}{
	"AdoptsOldOutcomesAfterLoss": {
		coordinatortest.CompareOptions{Seeds: 10, LoseState: loseState},
		func(clock func() time.Time) coordinator.Coordinator {
			l := newLossy(clock)
			l.adopt = true
			return l
		},
	},
	"HandsOutAGenerationTwice": {
		coordinatortest.CompareOptions{Seeds: 10},
		func(clock func() time.Time) coordinator.Coordinator {
			return &reborn{Coordinator: memory.New(memory.WithClock(clock)),
				first: map[string]uint64{}, last: map[string]uint64{}, again: map[string]uint64{}}
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
