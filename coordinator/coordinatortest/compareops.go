package coordinatortest

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/cbgrpc/cbgrpc/coordinator"
	"github.com/cbgrpc/cbgrpc/coordinator/implement"
)

// The operations [Compare]'s driver runs on both coordinators, each
// checking that their answers agree.

func (d *driver) outcome(s *cmpScope, replica string) coordinator.Outcome {
	// The bad replica fails alone: nearly every call, fast.
	if replica == s.bad && s.bad != "" && d.rng.IntN(10) < 9 {
		return coordinator.Outcome{Failure: true}
	}
	// A caller that throttles (Policy.Throttle) sends throttled requests
	// among its calls' outcomes, more of them while the dependency fails.
	if s.p.Throttle > 0 && d.rng.IntN(5) < 1+btoi(s.failing) {
		return coordinator.Outcome{Throttled: true}
	}
	return d.callOutcome(s)
}

// callOutcome is the outcome of a call that went through: probes are
// never throttled.
func (d *driver) callOutcome(s *cmpScope) coordinator.Outcome {
	p := 0.1
	if s.failing {
		p = s.share
	}
	o := coordinator.Outcome{Failure: d.rng.Float64() < p, Duration: time.Duration(d.rng.IntN(40)) * time.Millisecond}
	if o.Failure && d.rng.IntN(3) == 0 {
		// A call the caller reported while it still ran (a stall): a
		// failure whatever Failure says.
		o.Failure, o.Stalled = d.rng.IntN(2) == 0, true
	}
	if (s.failing && d.rng.IntN(2) == 0) || d.rng.IntN(10) == 0 {
		o.Duration += 40 * time.Millisecond
	}
	return o
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
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
	d.admitClaim(0, s, fmt.Sprintf("claim-%d", d.next), nil)
}

// admitSeen admits a call for a caller that has seen a generation of s:
// the last one answered, or one above it, which is what a caller would
// bring to a coordinator that lost state (rolled back by a failover).
// Both coordinators must give birth to s above it.
func (d *driver) admitSeen(s *cmpScope) {
	last := s.gen
	seen := last + uint64(d.rng.IntN(3))
	d.next++
	claim := fmt.Sprintf("claim-%d", d.next)
	d.note("seen s%d generation %d", s.index, seen)
	d.admitClaim(seen, s, claim, nil)
	if seen > last && s.gen == implement.NextGeneration(seen, d.now()) {
		d.hit(pathBornAboveSeen)
	}
}

// readmit admits the claim of a probe in flight again, as a caller retrying
// after a network error would.
func (d *driver) readmit(s *cmpScope) {
	c := pick(d, d.calls, s, func(c *call) bool { return c.probe && !c.lost })
	if c == nil {
		d.admit(s)
		return
	}
	d.admitClaim(0, s, c.claim, c)
}

func (d *driver) admitClaim(seen uint64, s *cmpScope, claim string, again *call) {
	ctx := context.Background()
	rd, refErr := d.ref.Admit(ctx, coordinator.AdmitRequest{Scope: s.alias, Policy: s.p, Claim: claim, Seen: seen})
	sd, sutErr := d.sut.Admit(ctx, coordinator.AdmitRequest{Scope: s.name, Policy: s.p, Claim: claim, Seen: seen})
	d.note("admit s%d %s -> %s", s.index, claim, showDecision(rd))
	d.noErr("Admit", refErr, sutErr)
	if rd.Verdict != sd.Verdict || rd.State != sd.State || rd.RetryAfter != sd.RetryAfter || rd.RampLeft != sd.RampLeft || rd.Generation != sd.Generation ||
		!samePolicyVersion(s, rd.PolicyVersion, sd.PolicyVersion) {
		d.fail("Admit(s%d, %s): reference %s, coordinator under test %s", s.index, claim, showDecision(rd), showDecision(sd))
	}
	d.sameTransition(s, "Admit("+claim+")", rd.Transition, sd.Transition)
	d.learn(s, rd.Generation, rd.Transition)
	if rd.PolicyVersion != 0 {
		d.hit(pathAnsweredOverride)
	}
	switch rd.Verdict {
	case coordinator.Allow:
		d.hit(pathAdmitted)
		if rd.RampLeft > 0 {
			d.hit(pathRamping)
		}
	case coordinator.Reject:
		switch rd.State {
		case coordinator.StateOpen:
			d.hit(pathRejectedOpen)
		case coordinator.StateIsolated:
			d.hit(pathRejectedIsolated)
		default:
			d.hit(pathRejectedProbeLimit)
		}
		if again == nil && d.rng.IntN(2) == 0 {
			// A dry-run replica lets it through, to report it.
			d.calls = append(d.calls, &call{s: s, claim: claim, dry: true, gen: rd.Generation})
		}
		return
	}
	c := again
	if c == nil {
		c = &call{s: s, claim: claim}
		d.calls = append(d.calls, c)
	} else if rd.Verdict == coordinator.Probe && rd.Generation == c.gen && !d.now().Before(c.leaseEnd) {
		d.hit(pathLeaseExpired)
	}
	if rd.Verdict == coordinator.Probe && (again == nil || rd.Generation != c.gen || !d.now().Before(c.leaseEnd)) {
		c.leaseEnd = d.now().Add(s.p.ProbeLease)
	}
	c.probe = rd.Verdict == coordinator.Probe
	c.gen = rd.Generation
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
	// Some of the scope's replicas run an override of the policy.
	b := &batch{s: s, p: s.p, replica: d.replica(s)}
	if d.rng.IntN(4) == 0 {
		b.p = s.alt
	}
	for _, c := range cands[:1+d.rng.IntN(min(4, len(cands)))] {
		d.calls = remove(d.calls, c)
		b.calls = append(b.calls, c)
		if c.dry {
			b.outs = append(b.outs, coordinator.Outcome{WouldReject: true})
		} else {
			b.outs = append(b.outs, d.outcome(s, b.replica))
		}
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

// probeOutlier has an outlier of s whose period ended send its probe; a
// Record of the scope if there is none.
func (d *driver) probeOutlier(s *cmpScope) {
	id := d.dueOutlier(s)
	if id == "" && len(s.outliers) > 0 {
		// Wait for the first period to end.
		first := slices.MinFunc(slices.Collect(maps.Values(s.outliers)), time.Time.Compare)
		d.clock.Set(first)
		d.note("wait until +%v for an outlier's probe", first.Sub(Start))
		id = d.dueOutlier(s)
	}
	if id == "" {
		d.record(s)
		return
	}
	c := d.admitOne(s)
	if c == nil {
		return
	}
	// Some have recovered, some have not; and a call it let through before
	// its spell may end late, a success that is no probe.
	// By the step: a draw of the generator here came out alike in every
	// sequence, and left the late success unreached.
	switch d.step % 3 {
	case 0:
		d.send(&batch{s: s, p: s.p, replica: id, calls: []*call{c}, outs: []coordinator.Outcome{{}}, late: true})
	case 1:
		d.send(&batch{s: s, p: s.p, replica: id, calls: []*call{c}, outs: []coordinator.Outcome{{Failure: true, Probe: true}}})
	default:
		d.send(&batch{s: s, p: s.p, replica: id, calls: []*call{c}, outs: []coordinator.Outcome{{Probe: true}}})
	}
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

// send records a batch: all of it on the coordinator under test, and on
// the reference what was admitted since the scope's last loss.
func (d *driver) send(b *batch) {
	s := b.s
	var refOuts, sutOuts []coordinator.Outcome
	lost := 0
	for i, c := range b.calls {
		o := b.outs[i]
		o.Generation = c.gen
		sutOuts = append(sutOuts, o)
		if c.lost {
			if !c.dry { // never stale: counted or not
				lost++
			}
			continue
		}
		refOuts = append(refOuts, o)
	}
	ctx := context.Background()
	q := coordinator.RecordRequest{Policy: b.p, BatchID: b.id, Replica: b.replica}
	var alt string
	if b.p != s.p {
		q.Source, alt = coordinator.SourceScope, fmt.Sprintf(" under %v/%d", b.p.Window, b.p.Buckets)
	}
	rq, sq := q, q
	rq.Scope, rq.Outcomes = s.alias, refOuts
	sq.Scope, sq.Outcomes = s.name, sutOuts
	rr, refErr := d.ref.Record(ctx, rq)
	sr, sutErr := d.sut.Record(ctx, sq)
	d.note("record s%d batch %q from %q%s %v (+%d lost) -> %s", s.index, b.id, b.replica, alt, refOuts, lost, showResult(rr))
	d.noErr("Record", refErr, sutErr)
	d.sameResult(s, fmt.Sprintf("Record(batch %q, %d outcomes%s)", b.id, len(sutOuts), alt), rr, sr, lost)
	if rr.Stale < len(refOuts) && rr.Transition == nil {
		// Counted: into the window's layout while a Record of it counted
		// within a window of it, else in b's, re-laid if the window was
		// written with another in this generation.
		now := d.clock.Now()
		// The start of the bucket of now, in b's layout.
		start := time.UnixMilli(now.UnixMilli() / b.p.BucketWidth().Milliseconds() * b.p.BucketWidth().Milliseconds())
		switch other := s.laid.Window != b.p.Window || s.laid.Buckets != b.p.Buckets; {
		case s.laidGen == rr.Generation && other && now.Sub(s.laidAt) < s.laid.Window:
			d.hit(pathOtherLayout)
		case s.laidGen == rr.Generation && other:
			d.hit(pathReLaid)
			s.laid, s.laidAt = b.p, start
		default:
			s.laid, s.laidGen, s.laidAt = b.p, rr.Generation, start
		}
	}
	if rr.Stale > 0 {
		d.hit(pathStaleOutcome)
		if rr.Outlier != nil && rr.Transition == nil {
			d.hit(pathOutlierStale)
			if b.late {
				d.hit(pathOutlierLate)
			}
		}
	}
	d.noteFailed(s, b, refOuts, rr)
	// An outlier often recovers, so that its probe succeeds.
	if t := rr.Transition; t != nil && t.Replica != "" && t.Replica == s.bad && d.rng.IntN(2) == 0 {
		s.bad = ""
	}
	// Counted: every outcome of the batch, a throttled request among them.
	if rr.Stale == 0 && rr.Transition == nil && slices.ContainsFunc(refOuts, func(o coordinator.Outcome) bool { return o.Throttled }) {
		d.hit(pathThrottled)
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

// settleCall settles c on both coordinators. A probe admitted before a
// loss is unknown to the reference's new scope, as it must be to the
// coordinator under test: both report it stale.
func (d *driver) settleCall(c *call) {
	s := c.s
	o := d.callOutcome(s)
	o.Generation = c.gen
	ctx := context.Background()
	rr, refErr := d.ref.Settle(ctx, coordinator.SettleRequest{Scope: s.alias, Policy: s.p, Claim: c.claim, Outcome: o})
	sr, sutErr := d.sut.Settle(ctx, coordinator.SettleRequest{Scope: s.name, Policy: s.p, Claim: c.claim, Outcome: o})
	d.note("settle s%d %s %+v (lost: %v) -> %s", s.index, c.claim, o, c.lost, showResult(sr))
	d.noErr("Settle", refErr, sutErr)
	if c.lost {
		d.hit(pathFenced)
	}
	d.sameResult(s, fmt.Sprintf("Settle(%s, %+v)", c.claim, o), rr, sr, 0)
	switch {
	case sr.Stale > 0:
		d.hit(pathStaleSettle)
		if c.probe && rr.Generation == c.gen && !d.now().Before(c.leaseEnd) {
			d.hit(pathLeaseExpired)
		}
	case o.Failed() || s.p.IsSlow(o.Duration):
		d.hit(pathSettledFailure)
	default:
		d.hit(pathSettledSuccess)
	}
}

func (d *driver) snapshot(s *cmpScope) {
	ctx := context.Background()
	// A reader of either policy reads the window as it was written.
	p := s.p
	if d.rng.IntN(3) == 0 {
		p = s.alt
	}
	rs, refErr := d.ref.Snapshot(ctx, s.alias, p)
	ss, sutErr := d.sut.Snapshot(ctx, s.name, p)
	d.note("snapshot s%d -> %s", s.index, showSnapshot(rs))
	d.noErr("Snapshot", refErr, sutErr)
	if len(rs.Policies) > 1 {
		d.hit(pathPoliciesSeen)
	}
	if len(rs.Outliers) > 0 {
		d.hit(pathOutlierListed)
	}
	if rs.WouldReject > 0 {
		d.hit(pathWouldReject)
	}
	if ss.Scope != s.name {
		d.fail("Snapshot(s%d): scope %q; want %q", s.index, ss.Scope, s.name)
	}
	rs.Scope = ss.Scope
	if !sameSnapshot(rs, ss) {
		d.fail("Snapshot(s%d): reference %s, coordinator under test %s", s.index, showSnapshot(rs), showSnapshot(ss))
	}
}

func (d *driver) abandon(s *cmpScope) {
	if c := pick(d, d.calls, s, func(*call) bool { return true }); c != nil {
		d.calls = remove(d.calls, c)
		d.note("abandon s%d %s", s.index, c.claim)
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
			return c.Isolate(ctx, coordinator.CommandRequest{Scope: scope, Policy: s.p, Note: n})
		case "disable":
			return c.Disable(ctx, coordinator.CommandRequest{Scope: scope, Policy: s.p, Note: n})
		case "release":
			return c.Release(ctx, coordinator.CommandRequest{Scope: scope, Policy: s.p, Note: n})
		}
		return c.Enable(ctx, coordinator.CommandRequest{Scope: scope, Policy: s.p, Note: n})
	}
	rr, refErr := run(d.ref, s.alias)
	sr, sutErr := run(d.ctl, s.name)
	d.note("%s s%d %+v -> %s", op, s.index, n, showResult(rr))
	d.noErr(op, refErr, sutErr)
	d.sameResult(s, fmt.Sprintf("%s(%+v)", op, n), rr, sr, 0)
}

// override sets or resets an override, of s or of the fleet default, on
// both coordinators: a small change of MinCalls or OpenFor, merged into
// what is there, or a reset. Both must store the same layers, versioned
// alike, and answer the same version afterwards. Coordinators check an
// override against DefaultPolicy, and the driver keeps passing its own
// policy: what a Breaker makes of the layers is not the coordinators'
// business.
func (d *driver) override(s *cmpScope) {
	ctx := context.Background()
	ref, sut := coordinator.ScopeTarget(s.alias), coordinator.ScopeTarget(s.name)
	if d.rng.IntN(4) == 0 || s.alias != s.name {
		// After a loss only the coordinator under test knows s's
		// override (samePolicyVersion): the fleet default then.
		ref, sut = coordinator.FleetDefault, coordinator.FleetDefault
	}
	d.next++
	n := coordinator.Note{By: "compare", Reason: fmt.Sprintf("override-%d", d.next)}
	var rr, sr coordinator.Overrides
	var refErr, sutErr error
	if d.rng.IntN(3) == 0 {
		rr, refErr = d.ref.ResetOverride(ctx, ref, n)
		sr, sutErr = d.ctl.ResetOverride(ctx, sut, n)
		d.hit(pathOverrideReset)
	} else {
		o := coordinator.Override{"MinCalls": fmt.Sprint(1 + d.rng.IntN(20))}
		if d.rng.IntN(2) == 0 {
			o = coordinator.Override{"OpenFor": fmt.Sprintf("%dms", 1+d.rng.IntN(1000))}
		}
		rr, refErr = d.ref.SetOverride(ctx, ref, o, n)
		sr, sutErr = d.ctl.SetOverride(ctx, sut, o, n)
		d.hit(pathOverrideSet)
	}
	d.note("override s%d %v %+v -> %+v", s.index, ref, n, rr)
	d.noErr("override", refErr, sutErr)
	rr.Replicas, sr.Replicas = coordinator.Replication{}, coordinator.Replication{}
	if !sameOverrides(rr, sr) {
		d.fail("override of %v: reference %+v, coordinator under test %+v", sut, rr, sr)
	}
}

// push is a server's pushback answered to a call of s: of the generation
// last answered, or of the one before it (a call whose outcome may have
// opened the breaker since).
func (d *driver) push(s *cmpScope) {
	ctx := context.Background()
	gen := s.gen
	if d.rng.IntN(4) == 0 && gen > 0 {
		gen = s.prev
	}
	periods := []time.Duration{0, 30 * time.Millisecond, 250 * time.Millisecond, time.Hour, -time.Second}
	period := periods[d.rng.IntN(len(periods))]
	d.next++
	reason := fmt.Sprintf("server pushback %v (%d)", period, d.next)
	rr, refErr := d.ref.Push(ctx, coordinator.PushRequest{Scope: s.alias, Policy: s.p, Generation: gen, Period: period, Reason: reason})
	sr, sutErr := d.pusher.Push(ctx, coordinator.PushRequest{Scope: s.name, Policy: s.p, Generation: gen, Period: period, Reason: reason})
	d.note("push s%d gen %d %v -> %s", s.index, gen, period, showResult(rr))
	d.noErr("Push", refErr, sutErr)
	d.sameResult(s, fmt.Sprintf("Push(gen %d, %v)", gen, period), rr, sr, 0)
	if rr.Transition != nil {
		d.hit(pathPushed)
	} else if rr.Stale == 0 {
		d.hit(pathPushSetPeriod)
	}
}

// replica picks the replica a batch of s comes from: the bad one often,
// one of a few others mostly, and now and then one of more replicas than
// the coordinators track, so that they evict.
func (d *driver) replica(s *cmpScope) string {
	switch n := d.rng.IntN(10); {
	case n < 3 && s.bad != "":
		return s.bad
	case n < 9:
		return fmt.Sprintf("r%d", d.rng.IntN(3))
	}
	return fmt.Sprintf("many-%d", d.rng.IntN(implement.TrackedReplicas+8))
}

// noteFailed counts the replicas that failed in the closed generation a
// Record counted in: more than the coordinators track, and they evict.
func (d *driver) noteFailed(s *cmpScope, b *batch, outs []coordinator.Outcome, res coordinator.Result) {
	if res.State != coordinator.StateClosed || res.Stale == len(outs) {
		return
	}
	if s.failedGen != res.Generation {
		s.failed, s.failedGen = map[string]bool{}, res.Generation
	}
	if slices.ContainsFunc(outs, func(o coordinator.Outcome) bool { return o.Failed() }) && !s.failed[b.replica] {
		s.failed[b.replica] = true
		if len(s.failed) == implement.TrackedReplicas+1 {
			d.hit(pathReplicasEvicted)
		}
	}
}

// crowd has more replicas than the coordinators track each record three
// successes and a failure, which trips no rule: the coordinators must
// evict the same ones.
func (d *driver) crowd(s *cmpScope) {
	n := implement.TrackedReplicas + 1 + d.rng.IntN(4)
	d.note("crowd of %d replicas on s%d", n, s.index)
	for i := range n {
		b := &batch{s: s, p: s.p, replica: fmt.Sprintf("crowd-%02d", (i*7)%n)}
		for j := range 4 {
			c := d.admitOne(s)
			if c == nil {
				return
			}
			b.calls = append(b.calls, c)
			b.outs = append(b.outs, coordinator.Outcome{Failure: j == 3})
		}
		d.send(b)
	}
}

// burst is a healthy spell over two buckets, which gives the fleet its
// pace, and then a brownout too quick for that pace to count calls the
// fleet has not sent: three replicas' calls at the same instant in turns,
// nearly all failed, which the recent rule judges before the window's
// ratio does.
func (d *driver) burst(s *cmpScope) {
	d.note("burst on s%d", s.index)
	var batches []*batch
	for range 4 {
		for i := range 3 {
			batches = append(batches, &batch{s: s, p: s.p, replica: fmt.Sprintf("burst-%d", i+1)})
		}
	}
	for range 2 {
		if !d.sendAll(s, &batch{s: s, p: s.p, replica: "burst-0"}, 15, false) {
			return
		}
		d.clock.Advance(s.p.BucketWidth())
	}
	for _, b := range batches {
		if !d.sendAll(s, b, 2, true) {
			return
		}
	}
}

// sendAll admits n calls of s and sends them as b, failed nearly all if
// failing, else succeeded; false if a call was not admitted.
func (d *driver) sendAll(s *cmpScope, b *batch, n int, failing bool) bool {
	for range n {
		c := d.admitOne(s)
		if c == nil {
			return false
		}
		b.calls = append(b.calls, c)
		b.outs = append(b.outs, coordinator.Outcome{Failure: failing && d.rng.IntN(10) < 9})
	}
	d.send(b)
	return true
}

// rollout has every replica of s run the other policy for longer than a
// window of either layout: one records a success under it every 100ms,
// so that the window's layout, once no Record of it has counted for a
// window of it, gives way to the other's.
func (d *driver) rollout(s *cmpScope) {
	d.note("rollout of s%d to %v/%d", s.index, s.alt.Window, s.alt.Buckets)
	for range (max(s.p.Window, s.alt.Window) / (100 * time.Millisecond)) + 2 {
		d.clock.Advance(100 * time.Millisecond)
		c := d.admitOne(s)
		if c == nil {
			return
		}
		d.send(&batch{s: s, p: s.alt, replica: "rollout", calls: []*call{c}, outs: []coordinator.Outcome{{}}})
	}
}

// admitOne admits a call of s under a claim of its own, for a batch:
// nil when it is rejected, or a probe (the scope is not closed).
func (d *driver) admitOne(s *cmpScope) *call {
	d.next++
	claim := fmt.Sprintf("claim-%d", d.next)
	d.admitClaim(0, s, claim, nil)
	c := pick(d, d.calls, s, func(c *call) bool { return c.claim == claim && !c.probe })
	if c != nil {
		d.calls = remove(d.calls, c)
	}
	return c
}
