package memory

import (
	"cmp"
	"slices"
	"strings"
	"time"

	"github.com/cbgrpc/cbgrpc/coordinator"
	"github.com/cbgrpc/cbgrpc/coordinator/implement"
)

// carriedPolicy is a policy Records carried (Snapshot.Policies): where it came
// from, and when the last Record that carried it came (ms).
type carriedPolicy struct {
	p      coordinator.Policy
	source coordinator.PolicySource
	at     int64
}

// carry notes that a Record carried r's policy, of fingerprint fp, from
// source. Every Record does, stale or not. A new fingerprint prunes the
// policies a window of r old, and keeps the newest
// implement.RecentPolicies: memory is bounded, and a fleet's steady
// Records cost no pruning.
func (b *breaker) carry(r *rules, now int64, fp string, source coordinator.PolicySource) {
	_, known := b.policies[fp]
	if b.policies == nil {
		b.policies = make(map[string]carriedPolicy, 1)
	}
	b.policies[fp] = carriedPolicy{p: r.p, source: source, at: now}
	if known {
		return
	}
	for f, sp := range b.policies {
		if sp.at <= now-r.width*r.buckets {
			delete(b.policies, f)
		}
	}
	if len(b.policies) > implement.RecentPolicies {
		for _, sp := range b.carriedPolicies(0)[implement.RecentPolicies:] {
			delete(b.policies, sp.Fingerprint)
		}
	}
}

// carriedPolicies lists the policies carried after since (ms), newest first,
// ties broken by fingerprint; nil when there are none.
func (b *breaker) carriedPolicies(since int64) []coordinator.CarriedPolicy {
	var out []coordinator.CarriedPolicy
	for fp, sp := range b.policies {
		if sp.at > since {
			out = append(out, coordinator.CarriedPolicy{Fingerprint: fp, Policy: sp.p, Source: sp.source, At: time.UnixMilli(sp.at)})
		}
	}
	slices.SortFunc(out, func(x, y coordinator.CarriedPolicy) int {
		return cmp.Or(y.At.Compare(x.At), strings.Compare(x.Fingerprint, y.Fingerprint))
	})
	return out
}
