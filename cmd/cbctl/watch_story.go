package main

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/cbgrpc/cbgrpc/coordinator"
	cbredis "github.com/cbgrpc/cbgrpc/coordinator/redis"
)

// story is what watch tells of each scope: every transition once, what a
// scope did before watch could follow it, and the replicas' outlier
// spells, which the feed does not carry and readings show. It is kept by
// the goroutine that prints.
type story struct {
	e      *env
	c      *cbredis.Coordinator
	p      coordinator.Policy
	scopes map[string]*told // the scopes known: read when watch started, or caught up since
}

// told is what watch has told of one scope.
type told struct {
	// printed are the transitions printed that the feed may bring still:
	// those it has not passed.
	printed []place
	read    time.Time        // when spells was read
	spells  map[string]spell // the outlier spells then, by replica
	warned  bool             // listed as corrupt, and said so
}

// spell is one replica's outlier spell: it lasts one generation at most,
// as a trip of the fleet ends every spell.
type spell struct {
	since      time.Time
	generation uint64
}

// place is what tells a scope's transitions apart, and orders them: the
// generation, then the state moved to, as only two moves keep the
// generation (open -> half-open, and an operator's disabled -> closed),
// then the time, as an operator who isolates again with another end
// moves isolated -> isolated in the same generation.
type place struct {
	generation uint64
	to         coordinator.State
	at         int64 // Unix ms, as the coordinator keeps it
}

func placeOf(t coordinator.Transition) place { return place{t.Generation, t.To, t.At.UnixMilli()} }

func (p place) after(q place) bool {
	second := func(s coordinator.State) bool { return s == coordinator.StateHalfOpen || s == coordinator.StateClosed }
	switch {
	case p.generation != q.generation:
		return p.generation > q.generation
	case second(p.to) != second(q.to):
		return second(p.to)
	}
	return p.at > q.at
}

func newStory(e *env, c *cbredis.Coordinator, p coordinator.Policy) *story {
	return &story{e: e, c: c, p: p, scopes: map[string]*told{}}
}

// begin takes the reading watch started with: what its scopes did before,
// and the spells that had begun, are no news.
func (st *story) begin(r reading) {
	for _, s := range r.scopes {
		t := &told{}
		st.scopes[s.Scope] = t
		st.warn(t, s)
		t.read, t.spells = r.at, spellsOf(s)
	}
}

// resume takes the reading a new Watch started with, once the feed was
// lost: scopes born meanwhile are caught up, and those the reading lacks
// (forgotten, not followed again) are dropped, to be caught up when a
// rescan finds them again. What was printed stays known: a repeat heard
// after reconnecting is not printed again, and as a transition is told
// apart by its time too, a generation lost to a failover hides nothing.
func (st *story) resume(ctx context.Context, r reading) error {
	if err := st.found(ctx, r); err != nil {
		return err
	}
	there := r.set()
	maps.DeleteFunc(st.scopes, func(scope string, _ *told) bool { return !there[scope] })
	return nil
}

// heard tells a transition of the feed, after the past of its scope when
// it is one that a rescan follows and has yet to hand over.
func (st *story) heard(ctx context.Context, t coordinator.Transition) error {
	if st.scopes[t.Scope] == nil {
		if err := st.catchUp(ctx, t.Scope, &t); err != nil {
			return err
		}
	}
	return st.tell(t, true)
}

// found tells what a reading found: new scopes, caught up, and the
// spells that began or ended since the last reading; a scope that is no
// longer there has none.
func (st *story) found(ctx context.Context, r reading) error {
	for _, s := range r.scopes {
		t := st.scopes[s.Scope]
		switch {
		case t == nil && s.Corrupt == nil:
			if err := st.catchUp(ctx, s.Scope, nil); err != nil {
				return err
			}
			continue
		case t == nil:
			t = &told{}
			st.scopes[s.Scope] = t
		}
		st.warn(t, s)
		if s.Corrupt == nil {
			if err := st.spells(s, r.at); err != nil {
				return err
			}
		}
	}
	there := r.set()
	for _, scope := range slices.Sorted(maps.Keys(st.scopes)) {
		if !there[scope] && len(st.scopes[scope].spells) > 0 {
			if err := st.spells(coordinator.Snapshot{Scope: scope}, r.at); err != nil {
				return err
			}
		}
	}
	return nil
}

func (st *story) warn(t *told, s coordinator.Snapshot) {
	if s.Corrupt != nil && !t.warned {
		t.warned = true
		fmt.Fprintf(st.e.stderr, "cbctl: watch: scope %s listed as corrupt: %s\n", quoteScope(s.Scope), escapeLines(s.Corrupt.Error()))
	}
}

// catchUp tells the past of a scope that watch follows only now, from its
// state read after Follow returned, so that the feed tells everything
// later: its last trip and its last transition, each unless the feed
// tells it next (at or after next, the transition that revealed the
// scope, when there is one), then its outlier spells. What it did between
// those two transitions is kept nowhere.
func (st *story) catchUp(ctx context.Context, scope string, next *coordinator.Transition) error {
	st.scopes[scope] = &told{}
	fmt.Fprintf(st.e.stderr, "cbctl: watch: following new scope %s\n", quoteScope(scope))
	ctx, cancel := context.WithTimeout(ctx, st.e.timeout)
	defer cancel()
	s, err := st.c.Snapshot(ctx, scope, st.p)
	var last coordinator.Transition
	moved := false
	if err == nil {
		last, moved, err = st.c.LastTransition(ctx, scope)
	}
	if err != nil {
		fmt.Fprintf(st.e.stderr, "cbctl: watch: scope %s: what it did before it was followed cannot be read: %s\n", quoteScope(scope), escapeLines(err.Error()))
		return nil
	}
	var past []coordinator.Transition
	if trip, ok := tripOf(s); ok && (!moved || placeOf(last).after(placeOf(trip))) {
		past = append(past, trip)
	}
	if moved {
		past = append(past, last)
	}
	for _, t := range past {
		if next != nil && !placeOf(*next).after(placeOf(t)) {
			break
		}
		if err := st.tell(t, false); err != nil {
			return err
		}
	}
	return st.spells(s, time.Now())
}

// tripOf is the last trip of s as a transition, from closed, or from
// half-open for a failed probe: the state keeps neither where it came
// from (a pushback that reopened a half-open breaker reads as from
// closed) nor the open period's end.
func tripOf(s coordinator.Snapshot) (coordinator.Transition, bool) {
	trip := s.LastTrip
	if trip.At.IsZero() {
		return coordinator.Transition{}, false
	}
	from := coordinator.StateClosed
	if trip.Reason == "probe failed" {
		from = coordinator.StateHalfOpen
	}
	return coordinator.Transition{Scope: s.Scope, From: from, To: coordinator.StateOpen, Generation: trip.Generation, At: trip.At, Reason: trip.Reason}, true
}

// tell prints t, from the feed or not, unless it was printed already:
// the feed carries a transition again once the replica that made it
// keeps its cause ([coordinator.CauseKeeper]), and a catch-up may have
// printed what the feed brings next. In a catch-up that raced with the
// feed, one transition may come out after the next: none is lost.
func (st *story) tell(t coordinator.Transition, feed bool) error {
	s := st.scopes[t.Scope]
	p := placeOf(t)
	if feed {
		// The feed brings again only the transition it carried last.
		s.printed = slices.DeleteFunc(s.printed, p.after)
	}
	if slices.Contains(s.printed, p) {
		return nil
	}
	s.printed = append(s.printed, p)
	return st.print(t)
}

// spells tells the outlier spells of s that ended since the last reading
// (no longer in s, or followed by another of the same replica), at, by
// cbctl's clock, and those that began, at their start. A reading older
// than the spells known tells nothing.
func (st *story) spells(s coordinator.Snapshot, at time.Time) error {
	t := st.scopes[s.Scope]
	if at.Before(t.read) {
		return nil
	}
	now := spellsOf(s)
	for _, replica := range slices.Sorted(maps.Keys(t.spells)) {
		was := t.spells[replica]
		if is, ok := now[replica]; ok && is.same(was) {
			continue
		}
		err := st.print(coordinator.Transition{Scope: s.Scope, Replica: replica, From: coordinator.StateOpen, To: coordinator.StateClosed,
			Generation: was.generation, At: at, Reason: "no longer an outlier"})
		if err != nil {
			return err
		}
	}
	for _, o := range s.Outliers {
		if was, ok := t.spells[o.Replica]; ok && was.same(now[o.Replica]) {
			continue
		}
		err := st.print(coordinator.Transition{Scope: s.Scope, Replica: o.Replica, From: coordinator.StateClosed, To: coordinator.StateOpen,
			Generation: s.Generation, At: o.Since, Reason: o.Reason})
		if err != nil {
			return err
		}
	}
	t.read, t.spells = at, now
	return nil
}

func (a spell) same(b spell) bool { return a.since.Equal(b.since) && a.generation == b.generation }

func spellsOf(s coordinator.Snapshot) map[string]spell {
	m := make(map[string]spell, len(s.Outliers))
	for _, o := range s.Outliers {
		m[o.Replica] = spell{since: o.Since, generation: s.Generation}
	}
	return m
}

func (st *story) print(t coordinator.Transition) error {
	if st.e.json {
		return writeJSONLine(st.e.stdout, toTransitionJSON(t))
	}
	_, err := fmt.Fprintln(st.e.stdout, transitionLine(t))
	return err
}
