package redis

import "github.com/cbgrpc/cbgrpc/coordinator"

// carriedPolicies reads the policies a Snapshot lists (snapshot.lua), in the
// order the script gives them: newest first.
func carriedPolicies(p *pairs) []coordinator.CarriedPolicy {
	var out []coordinator.CarriedPolicy
	p.each("policies", func(e *pairs) {
		// A policy encoded by a newer release may name a field this one
		// does not know: it is listed with the fields read before it, its
		// fingerprint still telling it apart.
		policy, _ := coordinator.DecodePolicy(e.str("encoding"))
		out = append(out, coordinator.CarriedPolicy{
			Fingerprint: e.str("fingerprint"),
			Policy:      policy,
			Source:      coordinator.PolicySource(e.int("source")),
			At:          unixMilli(e.int("at")),
		})
	})
	return out
}
