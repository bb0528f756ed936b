package main

import (
	"context"
	"fmt"
	"strings"

	goredis "github.com/redis/go-redis/v9"
)

// checkHashTag checks, on a Cluster, what keeps each scope's keys in one
// slot and spreads scopes over the masters: a prefix without a hash tag
// of its own (docs/redis.md, "Key layout"; a prefix with a brace is
// reported before connecting), and every slot served.
func (d *doctor) checkHashTag(ctx context.Context) {
	const check = "hash-tag"
	cc, ok := d.e.client.(*goredis.ClusterClient)
	if !ok {
		d.add(check, "", statusSkip, "not a Cluster: hash tags do not matter", "")
		return
	}
	info, err := cc.ClusterInfo(ctx).Result()
	if err != nil {
		d.add(check, "", statusFail, "CLUSTER INFO failed: "+err.Error(), "check the Cluster's nodes")
		return
	}
	fields := infoFields(info)
	if fields["cluster_state"] != "ok" || fields["cluster_slots_ok"] != "16384" {
		d.add(check, "", statusFail, fmt.Sprintf("cluster_state:%s, %s of 16384 slots served", fields["cluster_state"], fields["cluster_slots_ok"]),
			"assign every slot to a master that is up (redis-cli --cluster check)")
		return
	}
	d.add(check, "", statusOK, fmt.Sprintf("prefix %q holds no hash tag: each scope's keys carry their own, the digest of the scope, so they share a slot and scopes spread over the masters; all 16384 slots served", d.e.prefix), "")
}

// infoFields splits the "field:value" lines of an INFO-like reply.
func infoFields(s string) map[string]string {
	m := map[string]string{}
	for _, line := range strings.Split(s, "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok {
			m[k] = v
		}
	}
	return m
}
