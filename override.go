package cbgrpc

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel"

	"github.com/cbgrpc/cbgrpc/coordinator"
)

// The shared policy: an operator stores overrides in the coordinator
// (coordinator.Controller.SetOverride), a fleet default and one per scope,
// and the Breaker lays them over the policy of WithPolicy, the fleet
// default first. Every call and every coordinator operation of a scope
// then uses what they make (inForce), and every Record says where it came
// from, so the coordinator can tell drift (Snapshot.Policies).
//
// How a change arrives within a second: the feed publishes it (the fleet
// default's to every Watch, a scope's to the Watches that follow it), and
// every coordinator answer carries the version of its scope's override, so
// a change made while the feed was down is seen on the next round trip.
// Without a feed the fleet default is read every overridePoll. Reading is
// sharing's work, in the background: a call never waits for it, and until
// the first read a scope runs on its code's policy.

// overridePoll is how often the fleet default is read when no feed tells
// of its changes, and how soon a read that failed is tried again.
const overridePoll = 500 * time.Millisecond

// inForce is the policy a scope runs on, and where it came from: the
// code's laid under the fleet default, then under the scope's own layer.
// It never changes once made; the table holds a pointer.
type inForce struct {
	p     coordinator.Policy
	src   coordinator.PolicySource
	layer coordinator.PolicyLayer // the scope's own, as read; zero for the fleet-wide base
}

// version is the version of the scope's override it was made from.
func (f *inForce) version() uint64 {
	if f == nil {
		return 0
	}
	return f.layer.Version
}

// sharing reads the overrides the table asks for and tells the table what
// they make. Only run touches fleet.
type sharing struct {
	ctl  coordinator.Controller
	k    *knowledge
	code coordinator.Policy
	// poll: no feed tells of changes, so the fleet default is read every
	// overridePoll.
	poll atomic.Bool

	fleet      coordinator.PolicyLayer
	fleetStale atomic.Bool
	deaf       sync.Once // reports a feed that cannot tell policy changes
	// reported is the last invalid combination reported, so that one is
	// reported once, not on every read; unreported holds those make found
	// since, reported by refresh once it holds no lock (a user's error
	// handler may call the Breaker).
	reported   string
	unreported []error
}

func newSharing(ctl coordinator.Controller, k *knowledge, code coordinator.Policy, poll bool) *sharing {
	s := &sharing{ctl: ctl, k: k, code: code}
	s.poll.Store(poll)
	s.fleetStale.Store(true)
	return s
}

// heard takes a change the feed told of.
func (s *sharing) heard(ch coordinator.PolicyChange) {
	if ch.Target.Fleet {
		s.fleetChanged()
		return
	}
	s.k.saidPolicy(ch.Target.Scope, ch.Version)
}

// deafFeed takes a feed whose Watch cannot tell policy changes: the fleet
// default is read every overridePoll from then on. It is reported once,
// for it is most often a coordinator that wraps another and hid
// coordinator.PolicyWatch, at the price of two reads a second.
func (s *sharing) deafFeed(w coordinator.Watch) {
	s.poll.Store(true)
	s.deaf.Do(func() {
		otel.Handle(fmt.Errorf("cbgrpc: shared policy: the feed's Watch, %T, does not implement coordinator.PolicyWatch: "+
			"the fleet default is read every %v instead of heard of (a coordinator that wraps another should keep the interface)", w, overridePoll))
	})
}

// fleetChanged has the fleet default read again: its feed told of a
// change, or a new feed connection may have missed one.
func (s *sharing) fleetChanged() {
	s.fleetStale.Store(true)
	s.k.signalPolicies()
}

// run reads what is stale until ctx ends, from when warm is closed: the
// Breaker's first coordinator call dials the connection the reads then
// share, instead of each dialling one of its own.
func (s *sharing) run(ctx context.Context, warm <-chan struct{}) {
	select {
	case <-ctx.Done():
		return
	case <-warm:
	}
	t := time.NewTicker(overridePoll)
	defer t.Stop()
	for {
		s.refresh(ctx)
		select {
		case <-ctx.Done():
			return
		case <-s.k.policyWake:
		case <-t.C:
			if s.poll.Load() {
				s.fleetStale.Store(true)
			}
		}
	}
}

// refresh reads the fleet default if it is stale, then the override of
// each scope whose version the table has heard differ from the one it
// runs on. What cannot be read stays stale until the next tick.
func (s *sharing) refresh(ctx context.Context) {
	if s.fleetStale.Swap(false) {
		o, err := s.read(ctx, coordinator.FleetDefault)
		if err != nil {
			s.fleetStale.Store(true)
		} else {
			s.learnFleet(o.Fleet)
		}
	}
	for _, scope := range s.k.stalePolicies() {
		o, err := s.read(ctx, coordinator.ScopeTarget(scope))
		if err != nil {
			s.k.stalePolicy(scope)
			continue
		}
		s.learnFleet(o.Fleet)
		s.k.setPolicy(scope, s.make(o.Scope))
	}
	for _, err := range s.unreported {
		otel.Handle(fmt.Errorf("cbgrpc: shared policy: %w", err))
	}
	s.unreported = s.unreported[:0]
}

func (s *sharing) read(ctx context.Context, t coordinator.Target) (coordinator.Overrides, error) {
	ctx, cancel := context.WithTimeout(ctx, overridePoll)
	defer cancel()
	return s.ctl.Overrides(ctx, t)
}

// learnFleet takes the fleet default as read, if it is another: every
// scope's policy is made again.
func (s *sharing) learnFleet(l coordinator.PolicyLayer) {
	if l.Version == s.fleet.Version {
		return
	}
	s.fleet = l
	s.k.base.Store(s.make(coordinator.PolicyLayer{}))
	s.k.remake(s.make)
}

// make lays the fleet default and scope, a scope's own layer, over the
// code's policy. A layer that does not make a valid policy with the code's
// is left out and reported, once. It may run with the table's lock held.
func (s *sharing) make(scope coordinator.PolicyLayer) *inForce {
	p, src, err := coordinator.Overrides{Fleet: s.fleet, Scope: scope}.Apply(s.code)
	if err != nil {
		if msg := err.Error(); msg != s.reported {
			s.reported = msg
			s.unreported = append(s.unreported, err)
		}
	}
	return &inForce{p: p, src: src, layer: scope}
}

// The table's part of the shared policy (knowledge.go): what each scope
// runs on, and which scopes sharing is to read.

// policyIn is the policy of the scope f, what use returned, says.
func (k *knowledge) policyIn(f *fact) *inForce {
	if f.policy != nil {
		return f.policy
	}
	return k.base.Load()
}

// policyOf is the policy scope runs on.
func (k *knowledge) policyOf(scope string) *inForce {
	k.mu.RLock()
	var f *inForce
	if e := k.scopes[scope]; e != nil {
		f = e.policy
	}
	k.mu.RUnlock()
	if f != nil {
		return f
	}
	return k.base.Load()
}

// saidPolicy takes the version of scope's override that the coordinator
// said: if the scope runs on another, sharing is to read it.
func (k *knowledge) saidPolicy(scope string, version uint64) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if e := k.scopes[scope]; e != nil {
		k.versionSaid(scope, e, version)
	}
}

// versionSaid is saidPolicy of e, scope's row, for every answer that says
// the version (learn) and for the feed. k.mu is held.
func (k *knowledge) versionSaid(scope string, e *known, version uint64) {
	if e.policy.version() != version {
		k.stale[scope] = struct{}{}
		k.signalPolicies()
	}
}

// stalePolicy has sharing read scope's override again: a read failed.
func (k *knowledge) stalePolicy(scope string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.scopes[scope] != nil {
		k.stale[scope] = struct{}{}
	}
}

// stalePolicies hands sharing the scopes whose override it is to read.
func (k *knowledge) stalePolicies() []string {
	k.mu.Lock()
	defer k.mu.Unlock()
	scopes := make([]string, 0, len(k.stale))
	for s := range k.stale {
		if k.scopes[s] != nil {
			scopes = append(scopes, s)
		}
	}
	clear(k.stale)
	return scopes
}

// setPolicy makes scope run on p, unless it was forgotten meanwhile.
func (k *knowledge) setPolicy(scope string, p *inForce) {
	into := new(fact)
	k.mu.Lock()
	defer k.mu.Unlock()
	if e := k.scopes[scope]; e != nil {
		e.policy = p
		e.publish(into)
	}
}

// remake makes the policy of every scope that has one of its own again,
// from its own layer: the fleet default changed.
func (k *knowledge) remake(make func(coordinator.PolicyLayer) *inForce) {
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, e := range k.scopes {
		if e.policy != nil {
			e.policy = make(e.policy.layer)
			e.publish(new(fact)) // rare: the fleet default changed
		}
	}
}

func (k *knowledge) signalPolicies() {
	select {
	case k.policyWake <- struct{}{}:
	default:
	}
}
