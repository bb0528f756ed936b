package coordinatortest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cbgrpc/cbgrpc/coordinator"
	"github.com/cbgrpc/cbgrpc/coordinator/memory"
)

// CompareOptions tunes [Compare].
type CompareOptions struct {
	Seeds int // operation sequences to run; 0 means 40
	Steps int // operations per sequence; 0 means 300

	// LoseState, when set, is called at random steps to make the
	// coordinator under test lose scope's state record (as eviction or a
	// partial FLUSHDB would), leaving its window data. From then on the
	// reference runs that scope afresh under another name, generations are
	// compared through a one-to-one mapping that restarts at each loss,
	// and every outcome or probe settlement of a call admitted before the
	// loss goes to the coordinator under test only and must be stale
	// (rule 5). A loss of a scope that held nothing is the exception: see
	// [Compare].
	LoseState func(t *testing.T, sut coordinator.Coordinator, scope string)
}

// Compare drives the in-process coordinator (the reference) and the
// coordinator under test with the same random operation sequences, on the
// same fake clock, and fails at the first result that differs in any field.
// Each coordinator gets outcomes that carry the generations of its own
// decisions. Compare counts the paths of the contract the sequences
// reached, logs the counts, and fails if any path was never reached.
// When the coordinator under test is a [coordinator.Controller] and
// opts.LoseState is nil, operators' commands are in the mix too, with
// paths of their own.
//
// Generations are compared exactly, unless opts.LoseState is set. They are
// then compared through a one-to-one mapping, with three leeways where the
// contract pins nothing; each drops (sends to neither coordinator) the
// calls whose outcome it leaves open, and none lets an outcome admitted
// before a loss count while its generation could still be fenced:
//
//   - A generation the coordinator under test restarts a lost scope in
//     (any but 0, where a scope with nothing in it is) is kept for a window
//     after an operation other than Snapshot first showed it: the
//     reference's own expiry rule for a generation nothing was recorded
//     in. Once that has passed and the reference's scope holds nothing
//     (closed, generation 0, no counts), the coordinator may have forgotten
//     it (rule 6). The mapping then starts anew, and every call in flight
//     is dropped, those admitted before the loss too: generations counted
//     up again from a forgotten scope may come round to theirs, as the
//     reference's own do.
//   - A loss fences (rule 5) only what the coordinator can still find when
//     it notices the loss, which it may do lazily, at its first operation
//     other than Snapshot after it. If what the loss took had run out by
//     then (the reference's scope read nothing and a restarted generation
//     was past keeping), nothing survived to fence with: the calls in
//     flight are dropped, not required stale.
//   - Until the coordinator notices a loss, Snapshot binds no generation:
//     it may read the lost scope fresh, and restart it at its first write.
func Compare(t *testing.T, newCoordinator Factory, opts CompareOptions) {
	seeds, steps := opts.Seeds, opts.Steps
	if seeds <= 0 {
		seeds = 40
	}
	if steps <= 0 {
		steps = 300
	}
	var reached [numPaths]int
	controlled := false
	for seed := range seeds {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			d := newDriver(t, newCoordinator, opts, uint64(seed), &reached)
			controlled = controlled || d.ctl != nil
			d.run(steps)
		})
	}
	var counts, missing []string
	for i, n := range reached {
		if (i == pathLostState || i == pathFenced) && opts.LoseState == nil {
			continue
		}
		if i >= pathRejectedIsolated && !controlled {
			continue
		}
		counts = append(counts, fmt.Sprintf("%s %d", pathNames[i], n))
		if n == 0 {
			missing = append(missing, pathNames[i])
		}
	}
	t.Logf("paths reached in %d sequences of %d steps: %s", seeds, steps, strings.Join(counts, ", "))
	if len(missing) > 0 && !t.Failed() {
		t.Errorf("paths never reached: %s; run more or longer sequences", strings.Join(missing, ", "))
	}
}

const (
	pathOpened = iota
	pathAdmitted
	pathRejectedOpen
	pathRejectedProbeLimit
	pathLeaseExpired
	pathSettledSuccess
	pathSettledFailure
	pathClosedAgain
	pathStaleOutcome
	pathStaleSettle
	pathLostState
	pathFenced
	// with a coordinator.Controller (and no LoseState)
	pathRejectedIsolated
	pathIsolated
	pathIsolationEnded
	pathReleased
	pathDisabled
	pathCountedDisabled
	pathEnabled
	numPaths
)

var pathNames = [numPaths]string{
	"opened", "admitted", "rejected while open", "rejected at the probe limit", "lease expired",
	"settled success", "settled failure", "closed again", "stale outcome", "stale settle",
	"lost state that held something", "fenced after a loss",
	"rejected while isolated", "isolated", "isolation ended", "released", "disabled", "counted while disabled", "enabled",
}

// comparePolicy is a small policy, so that short sequences trip, probe,
// reopen and close many times.
func comparePolicy(rng *rand.Rand) coordinator.Policy {
	p := coordinator.Policy{
		Window:         time.Second,
		Buckets:        10,
		MinCalls:       4,
		FailureRatio:   0.5,
		OpenFor:        100 * time.Millisecond,
		Probes:         2,
		ProbeLease:     300 * time.Millisecond,
		ProbeSuccesses: 2,
	}
	if rng.IntN(3) == 0 {
		p.ConsecutiveFailures = 3
	}
	if rng.IntN(6) == 0 {
		p.FailureRatio, p.MinCalls, p.ConsecutiveFailures = 0, 0, 2
	}
	if rng.IntN(4) == 0 {
		p.SlowCallDuration, p.SlowCallRatio = 50*time.Millisecond, 0.5
		p.MinCalls = 4
	}
	if rng.IntN(2) == 0 {
		p.MaxOpenFor = 400 * time.Millisecond
	}
	switch rng.IntN(4) {
	case 0:
		p.ProbeSuccesses = 1
	case 1:
		p.ProbeSuccesses = 3
	}
	return p
}

type driver struct {
	t       *testing.T
	rng     *rand.Rand
	clock   *fakeClock
	ref     *memory.Coordinator
	sut     coordinator.Coordinator
	lose    func(*testing.T, coordinator.Coordinator, string)
	reached *[numPaths]int
	// ctl is the coordinator under test as a Controller, when it is one
	// and no state is lost: then operators' commands are in the mix.
	ctl coordinator.Controller

	scopes  []*cmpScope
	calls   []*call  // admitted, outcome not sent yet
	settled []*call  // settled probes, to settle again
	batches []*batch // recent batches with an ID, to retry
	next    int      // for unique claims and batch IDs
	step    int
	trail   []string // the last operations, for failure messages
}

type cmpScope struct {
	index   int
	name    string // the scope on the coordinator under test
	alias   string // the scope on the reference: a new one after each loss
	p       coordinator.Policy
	failing bool    // the dependency is failing: outcomes fail more often
	losses  int     // for naming the reference's next scope
	gens    *genMap // nil: generations compare exactly
	// unnoticed is what the last loss took, until the coordinator under
	// test has run an operation other than Snapshot since.
	unnoticed *lostState
}

// lostState is what a loss took from the coordinator under test, as the
// reference sees it.
type lostState struct {
	alias     string // the reference's scope as of the loss, frozen there
	keepUntil int64  // until when a generation restarted in was kept, Unix ms
}

// call is one admitted call, on both coordinators.
type call struct {
	s              *cmpScope
	claim          string
	probe          bool
	refGen, sutGen uint64
	lost           bool      // admitted before the coordinator under test lost the scope's state
	leaseEnd       time.Time // for probes
}

type batch struct {
	s     *cmpScope
	id    string
	calls []*call
	outs  []coordinator.Outcome // without generations
}

func newDriver(t *testing.T, f Factory, opts CompareOptions, seed uint64, reached *[numPaths]int) *driver {
	clock := newFakeClock()
	d := &driver{
		t:       t,
		rng:     rand.New(rand.NewPCG(seed, 0x636267727063)),
		clock:   clock,
		ref:     memory.New(memory.WithClock(clock.Now)),
		sut:     f(t, clock.Now),
		lose:    opts.LoseState,
		reached: reached,
	}
	if ctl, ok := d.sut.(coordinator.Controller); ok && d.lose == nil {
		d.ctl = ctl
	}
	for i, name := range []string{"{α}|a", "b\n"} {
		s := &cmpScope{index: i, name: t.Name() + "/" + name, p: comparePolicy(d.rng), failing: d.rng.IntN(2) == 0}
		s.alias = s.name
		if d.lose != nil {
			s.gens = newGenMap()
		}
		d.scopes = append(d.scopes, s)
	}
	return d
}

func (d *driver) run(steps int) {
	for d.step = 0; d.step < steps; d.step++ {
		s := d.scopes[d.rng.IntN(len(d.scopes))]
		if d.rng.IntN(40) == 0 {
			s.failing = !s.failing
		}
		if s.gens != nil {
			d.checkUnnoticed(s)
			d.checkForgotten(s)
		}
		switch n := d.rng.IntN(100); {
		case n < 27:
			d.admit(s)
		case n < 32:
			d.readmit(s)
		case n < 50:
			d.record(s)
		case n < 54:
			d.retryBatch(s)
		case n < 66:
			d.settle(s)
		case n < 70:
			d.settleStale(s)
		case n < 76:
			d.snapshot(s)
		case n < 79:
			d.abandon(s)
		case n < 81 && d.lose != nil:
			d.loseState(s)
		case n < 83 && d.ctl != nil:
			d.control(s)
		default:
			d.advance()
		}
		if len(d.calls) > 64 {
			d.calls = d.calls[1:]
		}
	}
}

func (d *driver) note(format string, args ...any) {
	line := fmt.Sprintf("step %d at +%v: ", d.step, d.clock.Now().Sub(start)) + fmt.Sprintf(format, args...)
	if len(d.trail) == 12 {
		d.trail = slices.Delete(d.trail, 0, 1)
	}
	d.trail = append(d.trail, line)
}

func (d *driver) fail(format string, args ...any) {
	d.t.Helper()
	var gens string
	if d.lose != nil {
		gens = fmt.Sprintf("\ngenerations since the last loss, reference: under test: %v %v",
			d.scopes[0].gens.refToSut, d.scopes[1].gens.refToSut)
	}
	d.t.Fatalf("%s\npolicies: %+v%s\nlast operations:\n  %s", fmt.Sprintf(format, args...),
		[]coordinator.Policy{d.scopes[0].p, d.scopes[1].p}, gens, strings.Join(d.trail, "\n  "))
}

func (d *driver) noErr(op string, refErr, sutErr error) {
	d.t.Helper()
	if refErr != nil {
		d.fail("%s: reference: %v", op, refErr)
	}
	if sutErr != nil {
		d.fail("%s: coordinator under test: %v", op, sutErr)
	}
}

func (d *driver) hit(path int) { d.reached[path]++ }

func (d *driver) now() time.Time { return d.clock.Now().Truncate(time.Millisecond) }

func (d *driver) advance() {
	step := time.Duration(1+d.rng.IntN(60)) * time.Millisecond
	if d.rng.IntN(10) == 0 {
		step = time.Duration(200+d.rng.IntN(2800)) * time.Millisecond
	}
	d.clock.Advance(step)
	d.note("advance %v", step)
}

func (d *driver) outcome(s *cmpScope) coordinator.Outcome {
	p := 0.1
	if s.failing {
		p = 0.7
	}
	o := coordinator.Outcome{Failure: d.rng.Float64() < p, Duration: time.Duration(d.rng.IntN(40)) * time.Millisecond}
	if (s.failing && d.rng.IntN(2) == 0) || d.rng.IntN(10) == 0 {
		o.Duration += 40 * time.Millisecond
	}
	return o
}

// pick returns a random call of s for which keep holds, or nil.
func pick(d *driver, list []*call, s *cmpScope, keep func(*call) bool) *call {
	var found []*call
	for _, c := range list {
		if c.s == s && keep(c) {
			found = append(found, c)
		}
	}
	if len(found) == 0 {
		return nil
	}
	return found[d.rng.IntN(len(found))]
}

func remove(list []*call, c *call) []*call {
	if i := slices.Index(list, c); i >= 0 {
		return slices.Delete(list, i, i+1)
	}
	return list
}

func (d *driver) admit(s *cmpScope) {
	d.next++
	d.admitClaim(s, fmt.Sprintf("claim-%d", d.next), nil)
}

// readmit admits the claim of a probe in flight again, as a caller retrying
// after a network error would.
func (d *driver) readmit(s *cmpScope) {
	c := pick(d, d.calls, s, func(c *call) bool { return c.probe && !c.lost })
	if c == nil {
		d.admit(s)
		return
	}
	d.admitClaim(s, c.claim, c)
}

func (d *driver) admitClaim(s *cmpScope, claim string, again *call) {
	ctx := context.Background()
	rd, refErr := d.ref.Admit(ctx, s.alias, s.p, claim)
	sd, sutErr := d.sut.Admit(ctx, s.name, s.p, claim)
	d.note("admit s%d %s -> %s", s.index, claim, showDecision(rd))
	d.noErr("Admit", refErr, sutErr)
	if rd.Verdict != sd.Verdict || rd.State != sd.State || rd.RetryAfter != sd.RetryAfter || !d.sameGen(s, rd.Generation, sd.Generation) {
		d.fail("Admit(s%d, %s): reference %s, coordinator under test %s", s.index, claim, showDecision(rd), showDecision(sd))
	}
	d.sameTransition(s, "Admit", rd.Transition, sd.Transition)
	switch rd.Verdict {
	case coordinator.Allow:
		d.hit(pathAdmitted)
	case coordinator.Reject:
		switch rd.State {
		case coordinator.StateOpen:
			d.hit(pathRejectedOpen)
		case coordinator.StateIsolated:
			d.hit(pathRejectedIsolated)
		default:
			d.hit(pathRejectedProbeLimit)
		}
		return
	}
	c := again
	if c == nil {
		c = &call{s: s, claim: claim}
		d.calls = append(d.calls, c)
	} else if rd.Verdict == coordinator.Probe && rd.Generation == c.refGen && !d.now().Before(c.leaseEnd) {
		d.hit(pathLeaseExpired)
	}
	if rd.Verdict == coordinator.Probe && (again == nil || rd.Generation != c.refGen || !d.now().Before(c.leaseEnd)) {
		c.leaseEnd = d.now().Add(s.p.ProbeLease)
	}
	c.probe = rd.Verdict == coordinator.Probe
	c.refGen, c.sutGen = rd.Generation, sd.Generation
}

func (d *driver) record(s *cmpScope) {
	var cands []*call
	for _, c := range d.calls {
		if c.s == s && !c.probe {
			cands = append(cands, c)
		}
	}
	if len(cands) == 0 {
		d.snapshot(s)
		return
	}
	d.rng.Shuffle(len(cands), func(i, j int) { cands[i], cands[j] = cands[j], cands[i] })
	b := &batch{s: s}
	for _, c := range cands[:1+d.rng.IntN(min(4, len(cands)))] {
		d.calls = remove(d.calls, c)
		b.calls = append(b.calls, c)
		b.outs = append(b.outs, d.outcome(s))
	}
	if d.rng.IntN(2) == 0 {
		d.next++
		b.id = fmt.Sprintf("batch-%d", d.next)
		if len(d.batches) == 8 {
			d.batches = d.batches[1:]
		}
		d.batches = append(d.batches, b)
	}
	d.send(b)
}

func (d *driver) retryBatch(s *cmpScope) {
	var mine []*batch
	for _, b := range d.batches {
		if b.s == s {
			mine = append(mine, b)
		}
	}
	if len(mine) == 0 {
		d.record(s)
		return
	}
	d.send(mine[d.rng.IntN(len(mine))])
}

func (d *driver) send(b *batch) {
	s := b.s
	var refOuts, sutOuts []coordinator.Outcome
	lost := 0
	for i, c := range b.calls {
		o := b.outs[i]
		o.Generation = c.sutGen
		sutOuts = append(sutOuts, o)
		if c.lost {
			lost++
			continue
		}
		o.Generation = c.refGen
		refOuts = append(refOuts, o)
	}
	ctx := context.Background()
	if b.id != "" {
		ctx = coordinator.WithBatchID(ctx, b.id)
	}
	rr, refErr := d.ref.Record(ctx, s.alias, s.p, refOuts)
	sr, sutErr := d.sut.Record(ctx, s.name, s.p, sutOuts)
	d.note("record s%d batch %q %v (+%d lost) -> %s", s.index, b.id, refOuts, lost, showResult(rr))
	d.noErr("Record", refErr, sutErr)
	if rr.State != sr.State || rr.Stale+lost != sr.Stale || !d.sameGen(s, rr.Generation, sr.Generation) {
		d.fail("Record(s%d, batch %q, %d outcomes of which %d lost): reference %s, coordinator under test %s (want %d more stale)",
			s.index, b.id, len(sutOuts), lost, showResult(rr), showResult(sr), lost)
	}
	d.sameTransition(s, "Record", rr.Transition, sr.Transition)
	if rr.Stale > 0 {
		d.hit(pathStaleOutcome)
	}
	if rr.State == coordinator.StateDisabled && rr.Stale < len(refOuts) {
		d.hit(pathCountedDisabled)
	}
	if lost > 0 {
		d.hit(pathFenced)
	}
}

func (d *driver) settle(s *cmpScope) {
	c := pick(d, d.calls, s, func(c *call) bool { return c.probe })
	if c == nil {
		d.admit(s)
		return
	}
	d.calls = remove(d.calls, c)
	if len(d.settled) == 16 {
		d.settled = d.settled[1:]
	}
	d.settled = append(d.settled, c)
	d.settleCall(c)
}

// settleStale settles a probe again, or a claim nobody made.
func (d *driver) settleStale(s *cmpScope) {
	if c := pick(d, d.settled, s, func(*call) bool { return true }); c != nil && d.rng.IntN(2) == 0 {
		d.settleCall(c)
		return
	}
	d.next++
	d.settleCall(&call{s: s, claim: fmt.Sprintf("ghost-%d", d.next)})
}

func (d *driver) settleCall(c *call) {
	s := c.s
	o := d.outcome(s)
	ctx := context.Background()
	if c.lost {
		so := o
		so.Generation = c.sutGen
		sr, sutErr := d.sut.Settle(ctx, s.name, s.p, c.claim, so)
		rs, refErr := d.ref.Snapshot(ctx, s.alias, s.p)
		d.note("settle s%d %s (lost) %+v -> %s", s.index, c.claim, so, showResult(sr))
		d.noErr("Settle", refErr, sutErr)
		if sr.Stale != 1 || sr.Transition != nil {
			d.fail("Settle(s%d, %s) of a probe admitted before the state was lost: %s; want it stale", s.index, c.claim, showResult(sr))
		}
		if sr.State != rs.State || !d.sameGen(s, rs.Generation, sr.Generation) {
			d.fail("Settle(s%d, %s) of a probe admitted before the state was lost: %s; want state and generation of the reference's %s",
				s.index, c.claim, showResult(sr), showSnapshot(rs))
		}
		d.hit(pathStaleSettle)
		d.hit(pathFenced)
		return
	}
	ro, so := o, o
	ro.Generation, so.Generation = c.refGen, c.sutGen
	rr, refErr := d.ref.Settle(ctx, s.alias, s.p, c.claim, ro)
	sr, sutErr := d.sut.Settle(ctx, s.name, s.p, c.claim, so)
	d.note("settle s%d %s %+v -> %s", s.index, c.claim, ro, showResult(rr))
	d.noErr("Settle", refErr, sutErr)
	if rr.State != sr.State || rr.Stale != sr.Stale || !d.sameGen(s, rr.Generation, sr.Generation) {
		d.fail("Settle(s%d, %s, %+v): reference %s, coordinator under test %s", s.index, c.claim, ro, showResult(rr), showResult(sr))
	}
	d.sameTransition(s, "Settle", rr.Transition, sr.Transition)
	switch {
	case rr.Stale > 0:
		d.hit(pathStaleSettle)
		if c.probe && rr.Generation == c.refGen && !d.now().Before(c.leaseEnd) {
			d.hit(pathLeaseExpired)
		}
	case o.Failure || s.p.IsSlow(o.Duration):
		d.hit(pathSettledFailure)
	default:
		d.hit(pathSettledSuccess)
	}
}

func (d *driver) snapshot(s *cmpScope) {
	ctx := context.Background()
	rs, refErr := d.ref.Snapshot(ctx, s.alias, s.p)
	ss, sutErr := d.sut.Snapshot(ctx, s.name, s.p)
	d.note("snapshot s%d -> %s", s.index, showSnapshot(rs))
	d.noErr("Snapshot", refErr, sutErr)
	if ss.Scope != s.name {
		d.fail("Snapshot(s%d): scope %q; want %q", s.index, ss.Scope, s.name)
	}
	sameGen := rs.Generation == ss.Generation
	if s.gens != nil {
		sameGen = s.gens.same(rs.Generation, ss.Generation, true, d.keepUntil(s))
	}
	if rs.State != ss.State || !sameGen ||
		rs.Calls != ss.Calls || rs.Failures != ss.Failures || rs.Slow != ss.Slow ||
		rs.ConsecutiveFailures != ss.ConsecutiveFailures ||
		!rs.OpenedAt.Equal(ss.OpenedAt) || !rs.OpenUntil.Equal(ss.OpenUntil) ||
		rs.ProbesInFlight != ss.ProbesInFlight || rs.ProbeSuccesses != ss.ProbeSuccesses ||
		rs.Operator != ss.Operator || !rs.ForcedAt.Equal(ss.ForcedAt) {
		d.fail("Snapshot(s%d): reference %s, coordinator under test %s", s.index, showSnapshot(rs), showSnapshot(ss))
	}
}

func (d *driver) abandon(s *cmpScope) {
	if c := pick(d, d.calls, s, func(*call) bool { return true }); c != nil {
		d.calls = remove(d.calls, c)
		d.note("abandon s%d %s", s.index, c.claim)
	}
}

func (d *driver) loseState(s *cmpScope) {
	took := &lostState{alias: s.alias, keepUntil: s.gens.keepUntil}
	held := !d.ranOut(s, took)
	d.lose(d.t, d.sut, s.name)
	s.losses++
	if held {
		d.eachCall(s, func(c *call) { c.lost = true })
		s.unnoticed = took
		d.hit(pathLostState)
	} else {
		// Nothing survives to fence these with: a coordinator may count
		// them in the generation it carries on in, or not. An earlier loss
		// still unnoticed stays so: this one took nothing.
		d.dropCalls(s, func(c *call) bool { return !c.lost })
	}
	s.alias = fmt.Sprintf("%s#lost-%d", s.name, s.losses)
	s.gens = newGenMap()
	s.gens.fromLoss = true
	d.note("lose state of s%d (held something: %v)", s.index, held)
}

// ranOut reports whether what a loss took no longer matters: the reference
// would have forgotten it by now.
func (d *driver) ranOut(s *cmpScope, l *lostState) bool {
	return d.now().UnixMilli() >= l.keepUntil && d.pristine(s, l.alias)
}

// pristine reports whether the reference's scope alias of s holds nothing:
// closed, generation 0, no counts, which is how a scope never used or
// forgotten after its window ran out reads.
func (d *driver) pristine(s *cmpScope, alias string) bool {
	rs, err := d.ref.Snapshot(context.Background(), alias, s.p)
	if err != nil {
		d.fail("Snapshot: reference: %v", err)
	}
	return rs.State == coordinator.StateClosed && rs.Generation == 0 && rs.Calls == 0 && rs.ConsecutiveFailures == 0
}

// checkUnnoticed drops the calls fenced by a loss that the coordinator
// under test has not noticed yet, once what the loss took has run out: when
// the coordinator notices, it finds nothing that still matters, and may
// restart the scope where a scope that ran out restarts, generation 0 and
// counting up. The operations that the last loss interrupted the fencing of
// are then as good as forgotten, so calls lost earlier go too.
func (d *driver) checkUnnoticed(s *cmpScope) {
	if s.unnoticed == nil {
		return
	}
	if _, bound := s.gens.refToSut[0]; bound && !s.gens.tentative {
		s.unnoticed = nil
		return
	}
	if d.ranOut(s, s.unnoticed) {
		d.note("s%d: the lost state ran out unnoticed", s.index)
		d.dropCalls(s, func(c *call) bool { return c.lost })
		s.unnoticed = nil
	}
}

// checkForgotten notices, before it can change an operation's result, that
// the coordinator under test forgot the generation it restarted a lost
// scope in, and starts the mapping anew (not as one restarted: the
// coordinator is where an unused scope is, and forgets nothing more). It
// allows that only where the reference would forget a generation with
// nothing recorded in it: once the reference's scope holds nothing and the
// generation is past keeping. Anywhere else, a difference is the
// operation's to report.
func (d *driver) checkForgotten(s *cmpScope) {
	m := s.gens
	bound := m.refToSut[0]
	if m.keepUntil == 0 || d.now().UnixMilli() < m.keepUntil || !d.pristine(s, s.alias) {
		return
	}
	ss, err := d.sut.Snapshot(context.Background(), s.name, s.p)
	if err != nil {
		d.fail("Snapshot: coordinator under test: %v", err)
	}
	if ss.Generation == bound {
		return
	}
	d.note("s%d forgotten: generation %d, was %d", s.index, ss.Generation, bound)
	d.dropCalls(s, func(*call) bool { return true })
	s.gens = newGenMap()
	s.gens.same(0, ss.Generation, false, d.keepUntil(s))
}

// keepUntil is when the reference would forget a closed generation of s
// first seen now with nothing recorded in it: a window on, counted in
// whole buckets.
func (d *driver) keepUntil(s *cmpScope) int64 {
	width := s.p.BucketWidth().Milliseconds()
	return (d.now().UnixMilli()/width + int64(s.p.Buckets)) * width
}

// eachCall calls f on every call of s the driver still holds.
func (d *driver) eachCall(s *cmpScope, f func(*call)) {
	for _, list := range [][]*call{d.calls, d.settled} {
		for _, c := range list {
			if c.s == s {
				f(c)
			}
		}
	}
	for _, b := range d.batches {
		if b.s == s {
			for _, c := range b.calls {
				f(c)
			}
		}
	}
}

// dropCalls forgets the calls of s for which drop holds, so that neither
// coordinator hears of them again.
func (d *driver) dropCalls(s *cmpScope, drop func(*call) bool) {
	gone := func(c *call) bool { return c.s == s && drop(c) }
	d.calls = slices.DeleteFunc(d.calls, gone)
	d.settled = slices.DeleteFunc(d.settled, gone)
	for _, b := range d.batches {
		if b.s != s {
			continue
		}
		var calls []*call
		var outs []coordinator.Outcome
		for i, c := range b.calls {
			if !drop(c) {
				calls, outs = append(calls, c), append(outs, b.outs[i])
			}
		}
		b.calls, b.outs = calls, outs
	}
	d.batches = slices.DeleteFunc(d.batches, func(b *batch) bool { return b.s == s && len(b.calls) == 0 })
}

// sameGen compares generations that an operation other than Snapshot
// returned.
func (d *driver) sameGen(s *cmpScope, ref, sut uint64) bool {
	if s.gens == nil {
		return ref == sut
	}
	return s.gens.same(ref, sut, false, d.keepUntil(s))
}

func (d *driver) sameTransition(s *cmpScope, op string, r, su *coordinator.Transition) {
	d.t.Helper()
	if r == nil && su == nil {
		return
	}
	if r == nil || su == nil || su.Scope != s.name || r.From != su.From || r.To != su.To ||
		!r.At.Equal(su.At) || r.Reason != su.Reason || !d.sameGen(s, r.Generation, su.Generation) {
		d.fail("%s(s%d): reference transition %s, coordinator under test %s (scope %q, want %q)",
			op, s.index, showTransition(r), showTransition(su), scopeOf(su), s.name)
	}
	switch {
	case r.To == coordinator.StateOpen && r.From == coordinator.StateClosed:
		d.hit(pathOpened)
	case r.To == coordinator.StateClosed && r.From == coordinator.StateHalfOpen:
		d.hit(pathClosedAgain)
	case r.To == coordinator.StateIsolated:
		d.hit(pathIsolated)
	case r.To == coordinator.StateDisabled:
		d.hit(pathDisabled)
	case r.Reason == coordinator.IsolationEnded:
		d.hit(pathIsolationEnded)
	case r.From == coordinator.StateDisabled && strings.HasPrefix(r.Reason, "enabled"):
		d.hit(pathEnabled)
	case r.To == coordinator.StateClosed:
		d.hit(pathReleased)
	}
}

// control runs an operator's command on both coordinators. Manual states
// are kept short, so that the other paths stay reachable: a command on an
// isolated or disabled scope mostly undoes it, and most isolations are for
// a set time.
func (d *driver) control(s *cmpScope) {
	ctx := context.Background()
	rs, err := d.ref.Snapshot(ctx, s.alias, s.p)
	if err != nil {
		d.fail("Snapshot: reference: %v", err)
	}
	ops := []string{"isolate", "disable", "release", "enable"}
	op := ops[d.rng.IntN(len(ops))]
	switch {
	case rs.State == coordinator.StateIsolated && d.rng.IntN(4) > 0:
		op = "release"
	case rs.State == coordinator.StateDisabled && d.rng.IntN(4) > 0:
		op = []string{"enable", "release"}[d.rng.IntN(2)]
	}
	d.next++
	n := coordinator.Note{By: "compare", Reason: fmt.Sprintf("%s-%d", op, d.next)}
	if op == "isolate" && d.rng.IntN(4) > 0 {
		n.For = time.Duration(1+d.rng.IntN(600)) * time.Millisecond
	}
	run := func(c coordinator.Controller, scope string) (coordinator.Result, error) {
		switch op {
		case "isolate":
			return c.Isolate(ctx, scope, s.p, n)
		case "disable":
			return c.Disable(ctx, scope, s.p, n)
		case "release":
			return c.Release(ctx, scope, s.p, n)
		}
		return c.Enable(ctx, scope, s.p, n)
	}
	rr, refErr := run(d.ref, s.alias)
	sr, sutErr := run(d.ctl, s.name)
	d.note("%s s%d %+v -> %s", op, s.index, n, showResult(rr))
	d.noErr(op, refErr, sutErr)
	if rr.State != sr.State || rr.Stale != sr.Stale || !d.sameGen(s, rr.Generation, sr.Generation) {
		d.fail("%s(s%d, %+v): reference %s, coordinator under test %s", op, s.index, n, showResult(rr), showResult(sr))
	}
	d.sameTransition(s, op, rr.Transition, sr.Transition)
}

func scopeOf(t *coordinator.Transition) string {
	if t == nil {
		return ""
	}
	return t.Scope
}

// genMap maps the reference's generations of one scope one-to-one to those
// of the coordinator under test, from its last loss of state on (or from
// when the coordinator under test forgot the generation it restarted in).
type genMap struct {
	refToSut, sutToRef map[uint64]uint64
	// tentative: only Snapshot has bound the reference's generation 0 so
	// far, and a coordinator may read a lost scope fresh until its first
	// write restarts it.
	tentative bool
	// fromLoss: the map began at a loss, so a generation other than 0
	// bound to the reference's 0 is one the coordinator under test
	// restarted in, which it keeps until keepUntil (Unix ms; 0 for no such
	// generation) even if nothing is recorded in it.
	fromLoss  bool
	keepUntil int64
}

func newGenMap() *genMap {
	return &genMap{refToSut: map[uint64]uint64{}, sutToRef: map[uint64]uint64{}}
}

// same reports whether ref and sut correspond, binding them if neither is
// bound yet. read says a Snapshot returned them; keepUntil is for a new
// binding of the reference's generation 0.
func (m *genMap) same(ref, sut uint64, read bool, keepUntil int64) bool {
	if ref == 0 && m.tentative {
		delete(m.sutToRef, m.refToSut[0])
		delete(m.refToSut, 0)
	}
	s, refKnown := m.refToSut[ref]
	r, sutKnown := m.sutToRef[sut]
	if refKnown || sutKnown {
		return refKnown && sutKnown && s == sut && r == ref
	}
	m.refToSut[ref], m.sutToRef[sut] = sut, ref
	if ref == 0 {
		m.tentative = read
		if !read && m.fromLoss && sut != 0 {
			m.keepUntil = keepUntil
		}
	}
	return true
}

func showTransition(t *coordinator.Transition) string {
	if t == nil {
		return "none"
	}
	return fmt.Sprintf("{%v -> %v gen %d at +%v %q}", t.From, t.To, t.Generation, t.At.Sub(start), t.Reason)
}

func showDecision(d coordinator.Decision) string {
	return fmt.Sprintf("{%v %v gen %d retry %v transition %s}", d.Verdict, d.State, d.Generation, d.RetryAfter, showTransition(d.Transition))
}

func showResult(r coordinator.Result) string {
	return fmt.Sprintf("{%v gen %d stale %d transition %s}", r.State, r.Generation, r.Stale, showTransition(r.Transition))
}

func showSnapshot(s coordinator.Snapshot) string {
	at := func(t time.Time) string {
		if t.IsZero() {
			return "0"
		}
		return "+" + t.Sub(start).String()
	}
	return fmt.Sprintf("{%v gen %d calls %d failures %d slow %d consecutive %d opened %s until %s probes %d successes %d}",
		s.State, s.Generation, s.Calls, s.Failures, s.Slow, s.ConsecutiveFailures, at(s.OpenedAt), at(s.OpenUntil), s.ProbesInFlight, s.ProbeSuccesses)
}
