package memory_test

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/cbgrpc/cbgrpc/coordinator"
	"github.com/cbgrpc/cbgrpc/coordinator/coordinatortest"
	"github.com/cbgrpc/cbgrpc/coordinator/implement"
	"github.com/cbgrpc/cbgrpc/coordinator/memory"
)

var fuzzPolicies = []coordinator.Policy{
	{Window: time.Second, Buckets: 10, MinCalls: 4, FailureRatio: 0.5, OpenFor: 100 * time.Millisecond,
		Probes: 2, ProbeLease: 300 * time.Millisecond, ProbeSuccesses: 2},
	{Window: time.Second, Buckets: 4, ConsecutiveFailures: 2, OpenFor: 50 * time.Millisecond, MaxOpenFor: 300 * time.Millisecond,
		Probes: 1, ProbeLease: 100 * time.Millisecond, ProbeSuccesses: 3},
	{Window: 500 * time.Millisecond, Buckets: 5, MinCalls: 2, FailureRatio: 0.3, ConsecutiveFailures: 3,
		SlowCallDuration: 50 * time.Millisecond, SlowCallRatio: 0.5, OpenFor: 20 * time.Millisecond, MaxOpenFor: 70 * time.Millisecond,
		Probes: 3, ProbeLease: 40 * time.Millisecond, ProbeSuccesses: 1},
}

// FuzzMemoryOperations runs the operation sequence the fuzz input encodes
// on one scope and checks, after every operation, what the contract
// promises whatever the sequence:
//   - an operation that writes never answers generation 0, and the
//     generations answered never decrease, across forgetting too;
//   - every new generation is implement.NextGeneration of the one
//     before, at a transition reported or at a birth: the first write to
//     a scope never used, or to one forgotten (closed, with no outcome for
//     a whole window), which reads as not born, exactly from when its last
//     bucket leaves, until then; or a write that carries a generation
//     above the stored one, as after a rollback (AdmitRequest.Seen);
//   - no more live probe leases than Probes, by Snapshot and by the
//     distinct claims holding a Probe verdict;
//   - an open breaker admits nothing before its open period ends, and that
//     period doubles on each reopening up to MaxOpenFor.
func FuzzMemoryOperations(f *testing.F) {
	f.Add([]byte{0, 3, 0x0f, 3, 0x0f, 0, 100, 1, 0, 1, 0, 1, 0, 4, 0, 4, 1, 5, 0})
	f.Add([]byte{1, 3, 0x07, 0, 60, 1, 0, 2, 0, 0, 150, 1, 0, 4, 0x80, 0, 250, 1, 0, 4, 0, 5, 0})
	f.Add([]byte{2, 6, 0x0d, 6, 0x0d, 3, 0xcd, 0, 30, 1, 0, 1, 0, 1, 0, 1, 0, 0, 45, 2, 1, 4, 2, 5, 0})
	f.Add([]byte{0, 3, 0x3f, 0, 255, 0, 255, 3, 0x41, 5, 0, 0, 200, 5, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) == 0 {
			return
		}
		m := newFuzzModel(t, fuzzPolicies[int(data[0])%len(fuzzPolicies)])
		for data = data[1:]; len(data) >= 2; data = data[2:] {
			m.step(data[0], data[1])
		}
	})
}

// fuzzModel is what a caller can know about one scope from the results of
// its own operations.
type fuzzModel struct {
	t     *testing.T
	p     coordinator.Policy
	clock *coordinatortest.Clock
	c     *memory.Coordinator

	state     coordinator.State // stored state: open until an Admit moves it
	gen       uint64            // stored generation: 0 until the first write, kept when forgotten
	highest   uint64            // the highest generation answered so far
	forgetAt  int64             // ms: when a closed scope is forgotten
	openUntil int64             // ms
	period    time.Duration
	leases    map[string]int64 // claim -> lease end, ms, in the current half-open period
	claims    []string
	ops       []string
}

func newFuzzModel(t *testing.T, p coordinator.Policy) *fuzzModel {
	c, clk := onFakeClock()
	return &fuzzModel{t: t, p: p, clock: clk, c: c, leases: map[string]int64{}}
}

func (m *fuzzModel) now() int64 { return m.clock.Now().UnixMilli() }

// notBorn reports whether the scope reads as not born: never written, or
// closed past keeping.
func (m *fuzzModel) notBorn() bool {
	return m.gen == 0 || m.state == coordinator.StateClosed && m.now() >= m.forgetAt
}

// mint is the generation a transition or a birth makes now.
func (m *fuzzModel) mint() uint64 { return implement.NextGeneration(m.gen, m.clock.Now()) }

// write gives birth to a scope that is not born, or whose generation lies
// below seen, the highest the operation carries (implement.Seen), as
// every operation but Snapshot does first.
func (m *fuzzModel) write(seen uint64) {
	if m.notBorn() || m.gen < seen {
		m.gen = implement.NextGeneration(max(m.gen, seen), m.clock.Now())
		m.state = coordinator.StateClosed
		m.leases = map[string]int64{}
		m.forgetAt = m.forgetsAt(m.now())
	}
}

// answered checks the generation an operation that writes answered.
func (m *fuzzModel) answered(op string, gen uint64) {
	m.t.Helper()
	if gen == 0 || gen < m.highest {
		m.failf("%s: generation %d after %d; want neither 0 nor less", op, gen, m.highest)
	}
	if gen != m.gen {
		m.failf("%s: generation %d; want %d", op, gen, m.gen)
	}
	m.highest = gen
}

func (m *fuzzModel) failf(format string, args ...any) {
	m.t.Helper()
	m.t.Fatalf("%s\npolicy %+v\nlast operations:\n%s", fmt.Sprintf(format, args...), m.p, strings.Join(m.ops, "\n"))
}

// live counts the live leases, forgetting the others.
func (m *fuzzModel) live() int {
	for claim, end := range m.leases {
		if end <= m.now() {
			delete(m.leases, claim)
		}
	}
	return len(m.leases)
}

// note keeps the last operations for failure messages.
func (m *fuzzModel) note(format string, args ...any) {
	if len(m.ops) == 40 {
		m.ops = m.ops[1:]
	}
	m.ops = append(m.ops, fmt.Sprintf(format, args...))
}

// forgetsAt is when a closed scope whose last outcome (or closing) was at
// ms is forgotten: when that bucket leaves the window.
func (m *fuzzModel) forgetsAt(ms int64) int64 {
	w := m.p.BucketWidth().Milliseconds()
	return (ms/w + int64(m.p.Buckets)) * w
}

func (m *fuzzModel) step(op, arg byte) {
	m.t.Helper()
	ctx := context.Background()
	switch op % 7 {
	case 0:
		d := time.Duration(arg) * time.Millisecond
		if arg >= 200 {
			d = time.Duration(arg-199) * 100 * time.Millisecond
		}
		m.clock.Advance(d)
		m.note("advance %v", d)
		return
	case 1:
		m.claims = append(m.claims, fmt.Sprintf("c%d", len(m.claims)))
		m.admit(ctx, 0, m.claims[len(m.claims)-1])
	case 2:
		if len(m.claims) == 0 {
			return
		}
		m.admit(ctx, 0, m.claims[int(arg)%len(m.claims)])
	case 3, 6:
		var outcomes []coordinator.Outcome
		for i := range 1 + int(arg%4) {
			o := coordinator.Outcome{Generation: m.gen, Failure: arg>>(2+i)&1 == 1}
			if arg&0x20 != 0 {
				o.Duration = time.Second
			}
			outcomes = append(outcomes, o)
		}
		switch arg >> 6 {
		case 2:
			outcomes[0].Generation--
		case 3:
			outcomes[0].Generation++
		}
		var batch string
		if op%7 == 6 {
			batch = fmt.Sprintf("b%d", arg%4)
		}
		m.record(ctx, batch, outcomes)
	case 4:
		if len(m.claims) == 0 {
			return
		}
		o := coordinator.Outcome{Generation: m.gen, Failure: arg&0x80 != 0}
		if arg&0x40 != 0 {
			o.Generation++
		}
		if arg&0x20 != 0 {
			o.Duration = time.Second
		}
		m.settle(m.claims[int(arg)%len(m.claims)], o)
	case 5:
		// A caller that has seen the stored generation, or one above it
		// (after a rollback).
		m.claims = append(m.claims, fmt.Sprintf("c%d", len(m.claims)))
		m.admit(ctx, m.gen+uint64(arg%3), m.claims[len(m.claims)-1])
	}
	s, err := m.c.Snapshot(ctx, "fuzz", m.p)
	if err != nil {
		m.failf("Snapshot: %v", err)
	}
	if m.notBorn() {
		if !reflect.DeepEqual(s, coordinator.Snapshot{Scope: "fuzz"}) {
			m.failf("snapshot %+v; want a scope not born", s)
		}
	} else if s.Generation != m.gen {
		m.failf("snapshot generation %d; want %d", s.Generation, m.gen)
	}
	if s.ProbesInFlight > m.p.Probes || s.ProbesInFlight != m.live() {
		m.failf("snapshot %+v: %d probes in flight; %d claims hold a live Probe verdict, at most %d allowed",
			s, s.ProbesInFlight, m.live(), m.p.Probes)
	}
	if m.state == coordinator.StateOpen && s.OpenUntil.UnixMilli() != m.openUntil {
		m.failf("snapshot open until %v; want %v", s.OpenUntil, time.UnixMilli(m.openUntil))
	}
}

func (m *fuzzModel) admit(ctx context.Context, seen uint64, claim string) {
	m.t.Helper()
	m.write(implement.Seen(seen))
	liveBefore, held := m.live(), m.leases[claim] > m.now()
	d, err := m.c.Admit(ctx, coordinator.AdmitRequest{Scope: "fuzz", Policy: m.p, Claim: claim, Seen: seen})
	m.note("admit %s -> %v %v gen %d retry %v", claim, d.Verdict, d.State, d.Generation, d.RetryAfter)
	if err != nil {
		m.failf("Admit: %v", err)
	}
	switch m.state {
	case coordinator.StateClosed:
		if d.Verdict != coordinator.Allow || d.Transition != nil {
			m.failf("closed breaker: Admit = %+v; want Allow", d)
		}
	case coordinator.StateOpen:
		if m.now() < m.openUntil {
			if d.Verdict != coordinator.Reject || d.RetryAfter != time.Duration(m.openUntil-m.now())*time.Millisecond {
				m.failf("open breaker %dms before the end of its open period: Admit = %+v", m.openUntil-m.now(), d)
			}
			break
		}
		if d.Verdict != coordinator.Probe || d.Transition == nil || d.Transition.To != coordinator.StateHalfOpen || d.Transition.Generation != m.gen {
			m.failf("open breaker after its open period: Admit = %+v; want a probe and a transition to half-open", d)
		}
		m.state = coordinator.StateHalfOpen
		m.leases = map[string]int64{claim: m.now() + m.p.ProbeLease.Milliseconds()}
	case coordinator.StateHalfOpen:
		switch {
		case held:
			if d.Verdict != coordinator.Probe {
				m.failf("claim %s holds a live lease: Admit = %+v; want Probe", claim, d)
			}
		case d.Verdict == coordinator.Probe:
			if liveBefore >= m.p.Probes {
				m.failf("Admit(%s) = Probe with %d of %d probe slots already leased", claim, liveBefore, m.p.Probes)
			}
			m.leases[claim] = m.now() + m.p.ProbeLease.Milliseconds()
		case liveBefore < m.p.Probes:
			m.failf("Admit(%s) = %+v with %d of %d probe slots leased; want Probe", claim, d, liveBefore, m.p.Probes)
		}
	}
	m.answered("Admit", d.Generation)
}

func (m *fuzzModel) record(ctx context.Context, batch string, outcomes []coordinator.Outcome) {
	m.t.Helper()
	m.write(implement.Seen(0, outcomes...))
	res, err := m.c.Record(ctx, coordinator.RecordRequest{Scope: "fuzz", Policy: m.p, Outcomes: outcomes, BatchID: batch})
	m.note("record %v -> %+v", outcomes, res)
	if err != nil {
		m.failf("Record: %v", err)
	}
	switch {
	case m.state != coordinator.StateClosed:
		if res.Stale != len(outcomes) || res.Transition != nil {
			m.failf("Record while %v: %+v; want all %d stale", m.state, res, len(outcomes))
		}
	case res.Transition != nil:
		if res.Transition.From != coordinator.StateClosed || res.Transition.To != coordinator.StateOpen || res.Transition.Generation != m.mint() {
			m.failf("Record: transition %+v; want closed -> open in generation %d", *res.Transition, m.mint())
		}
		m.gen = m.mint()
		m.state = coordinator.StateOpen
		m.period = m.p.OpenFor
		m.openUntil = m.now() + m.period.Milliseconds()
	case res.Stale < len(outcomes):
		m.forgetAt = m.forgetsAt(m.now())
	}
	m.answered("Record", res.Generation)
}

func (m *fuzzModel) settle(claim string, o coordinator.Outcome) {
	m.t.Helper()
	m.write(o.Generation)
	counts := m.state == coordinator.StateHalfOpen && o.Generation == m.gen && m.leases[claim] > m.now()
	res, err := m.c.Settle(context.Background(), coordinator.SettleRequest{Scope: "fuzz", Policy: m.p, Claim: claim, Outcome: o})
	m.note("settle %s %+v -> %+v", claim, o, res)
	if err != nil {
		m.failf("Settle: %v", err)
	}
	if !counts {
		if res.Stale != 1 || res.Transition != nil {
			m.failf("Settle(%s) without a live lease or with generation %d in %d: %+v; want it stale", claim, o.Generation, m.gen, res)
		}
	} else {
		delete(m.leases, claim)
		if res.Stale != 0 {
			m.failf("Settle(%s) of a live lease: %+v; want it counted", claim, res)
		}
		if tr := res.Transition; tr != nil {
			if tr.From != coordinator.StateHalfOpen || tr.Generation != m.mint() {
				m.failf("Settle: transition %+v; want from half-open in generation %d", *tr, m.mint())
			}
			m.gen = m.mint()
			m.state = tr.To
			m.leases = map[string]int64{}
			switch tr.To {
			case coordinator.StateOpen:
				if !o.Failure && !m.p.IsSlow(o.Duration) {
					m.failf("a successful probe reopened the breaker: %+v", res)
				}
				if m.p.MaxOpenFor > 0 {
					m.period = min(max(m.period, m.p.OpenFor)*2, m.p.MaxOpenFor)
				} else {
					m.period = m.p.OpenFor
				}
				m.openUntil = m.now() + m.period.Milliseconds()
			case coordinator.StateClosed:
				m.forgetAt = m.forgetsAt(m.now())
			default:
				m.failf("Settle: transition %+v", *tr)
			}
		} else if o.Failure || m.p.IsSlow(o.Duration) {
			m.failf("a failed probe did not reopen the breaker: %+v", res)
		}
	}
	m.answered("Settle", res.Generation)
}
