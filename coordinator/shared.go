package coordinator

import (
	"context"
	"fmt"
	"time"
)

// A policy the fleet shares: an operator stores an [Override] for one
// scope, or a fleet default for every scope of the coordinator, with
// [Controller.SetOverride]; every Breaker lays them over the policy its
// code passes (the fleet default first, then the scope's own), so that a
// threshold changes without a redeploy. Coordinators store and publish the
// overrides; applying them is the Breaker's work, like every client-side
// concern, and the policy passed to each operation stays the one that
// decides it.

// Target is what an override is for: one scope, or the fleet default.
type Target struct {
	Scope string // the scope, when Fleet is false; any bytes but none ([CheckScope])
	// Fleet names the fleet default: it applies to every scope of the
	// coordinator (every scope under its key prefix, on Redis) that has
	// no override of the same field.
	Fleet bool
}

// ScopeTarget names the override of one scope.
func ScopeTarget(scope string) Target { return Target{Scope: scope} }

// FleetDefault names the fleet default.
var FleetDefault = Target{Fleet: true}

func (t Target) String() string {
	if t.Fleet {
		return "the fleet default"
	}
	return fmt.Sprintf("scope %q", t.Scope)
}

// PolicyLayer is one stored override, and who set it when.
type PolicyLayer struct {
	Override Override // nil or empty: none
	// Version orders the changes of one target: every change gets
	// implement.NextGeneration(previous, now), so that it only grows, and
	// a reset keeps growing it. 0: never set.
	Version uint64
	By      string    // who set it, from the Note
	Reason  string    // why, from the Note
	At      time.Time // when, by the coordinator's clock
}

// Overrides are the layers a scope's policy is made of besides the code's.
type Overrides struct {
	Fleet PolicyLayer // the fleet default
	Scope PolicyLayer // the scope's own override; zero when read for FleetDefault
	// Replicas says, after SetOverride or ResetOverride changed
	// something, whether the change reached the store's replicas, as
	// [Result].Replicas does for the other operators' commands; zero
	// otherwise.
	Replicas Replication
}

// PolicySource says where the policy in force came from.
type PolicySource int

const (
	SourceCode  PolicySource = iota // the policy the Breaker's code passes, as it is
	SourceFleet                     // the code's, with the fleet default laid over it
	SourceScope                     // with the scope's override laid over it (and the fleet default, if any)
)

func (s PolicySource) String() string {
	switch s {
	case SourceCode:
		return "code"
	case SourceFleet:
		return "fleet default"
	case SourceScope:
		return "scope override"
	}
	return fmt.Sprintf("PolicySource(%d)", int(s))
}

// Apply lays the fleet default, then the scope's override, over code, and
// says where the result came from. A layer that makes the policy invalid
// laid over code (which the coordinator could not know when the operator
// set it) is left out, and the error says which and why; the policy
// returned is then the best of what remains, valid whenever code is.
func (o Overrides) Apply(code Policy) (Policy, PolicySource, error) {
	p, src := code, SourceCode
	var errs error
	if len(o.Fleet.Override) > 0 {
		q, err := o.Fleet.Override.Apply(p)
		if err != nil {
			errs = fmt.Errorf("the fleet default is left out: %w", err)
		} else {
			p, src = q, SourceFleet
		}
	}
	if len(o.Scope.Override) > 0 {
		q, err := o.Scope.Override.Apply(p)
		if err != nil {
			if errs != nil {
				return p, src, fmt.Errorf("%v; the scope's override is left out too: %w", errs, err)
			}
			errs = fmt.Errorf("the scope's override is left out: %w", err)
		} else {
			p, src = q, SourceScope
		}
	}
	return p, src, errs
}

// CarriedPolicy is a policy that Records of a scope carried: coordinators
// keep, per scope, each distinct policy (by [Policy.Fingerprint]) with
// the last time a Record carried it, and report those of the last window
// in Snapshot.Policies.
type CarriedPolicy struct {
	Fingerprint string
	Policy      Policy
	Source      PolicySource
	At          time.Time // the last Record that carried it, by the coordinator's clock
}

// PolicyChange tells a [PolicyWatch] that an override was set or reset.
type PolicyChange struct {
	Target  Target
	Version uint64 // the target's version after the change
}

// PolicyWatch is implemented by a [Watch] that also tells of changes of
// overrides: those of the scopes it follows, and of the fleet default.
// Both coordinators of this module implement it. A Breaker whose feed's
// Watch does not reads the fleet default twice a second instead (and says
// so, once, to the OpenTelemetry error handler), so a coordinator that
// wraps another should keep it on the Watches it wraps.
type PolicyWatch interface {
	// FollowPolicies has the Watch call f with every change of the fleet
	// default, and of the override of a scope it follows, made after
	// FollowPolicies returns, until the Watch ends. f runs on a goroutine
	// of the Watch, in the order of each target's changes (changes of
	// different targets may arrive out of order), and must not block.
	FollowPolicies(ctx context.Context, f func(PolicyChange)) error
}
