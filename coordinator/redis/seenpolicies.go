package redis

import "github.com/cbgrpc/cbgrpc/coordinator"

// seenPolicies reads the policies a Snapshot lists (snapshot.lua), four
// values each, in the order the script gives them: newest first.
func seenPolicies(r *replyReader, reply []any) []coordinator.SeenPolicy {
	var out []coordinator.SeenPolicy
	for i := 0; i+3 < len(reply); i += 4 {
		// A policy encoded by a newer release may name a field this one
		// does not know: it is listed with the fields read before it, its
		// fingerprint still telling it apart.
		p, _ := coordinator.DecodePolicy(r.str(reply, i+3))
		out = append(out, coordinator.SeenPolicy{
			Fingerprint: r.str(reply, i),
			Policy:      p,
			Source:      coordinator.PolicySource(r.int(reply, i+2)),
			At:          unixMilli(r.int(reply, i+1)),
		})
	}
	return out
}
