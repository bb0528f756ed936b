package main

import (
	"context"
	"fmt"
	"strconv"

	goredis "github.com/redis/go-redis/v9"
)

// checkReplicas reads INFO replication (the node must be a master) and,
// where there are replicas to wait for, whether WAIT hears from them
// within --replica-timeout, as operators' commands wait (--replicas N
// says how many must; the coordinator's redis.WithReplicas).
func (d *doctor) checkReplicas(ctx context.Context, n *goredis.Client) {
	const check = "replicas"
	info, err := n.InfoMap(ctx, "replication").Result()
	if err != nil {
		d.add(check, d.node(n), statusFail, "INFO replication refused: "+err.Error(),
			"grant +info (docs/redis-acl.md): the feeds' heartbeats and operators' commands read it")
		return
	}
	r := info["Replication"]
	if r["role"] != "master" {
		d.add(check, d.node(n), statusFail, fmt.Sprintf("role:%s, a replica of %s:%s", r["role"], r["master_host"], r["master_port"]),
			"point cbctl and the services at the master (or at the Sentinels, with --sentinel)")
		return
	}
	have, _ := strconv.Atoi(r["connected_slaves"])
	want := d.e.replicas
	if want == 0 {
		want = have
	}
	switch {
	case want == 0 && d.sentinel:
		d.add(check, d.node(n), statusWarn, "the master has no replica connected: the Sentinels have none to fail over to",
			"start the replicas, or check their link to the master (INFO replication on each)")
		return
	case want == 0:
		d.add(check, d.node(n), statusOK, "no replica: operators' commands have none to wait for (give --replicas N where the deployment has replicas)", "")
		return
	case have < want:
		d.add(check, d.node(n), statusFail, fmt.Sprintf("%d replicas connected, %d expected (--replicas): operators' changes would not be confirmed (cbctl exit status 4)", have, want),
			"start the missing replicas, or check their link to the master; give --replicas as the services' redis.WithReplicas")
		return
	}
	got, err := n.Wait(ctx, want, d.e.replicaTimeout).Result()
	switch {
	case err != nil:
		d.add(check, d.node(n), statusFail, fmt.Sprintf("%d replicas connected; WAIT refused: %v", have, err),
			"grant +wait (docs/redis-acl.md): operators' commands wait for the replicas")
	case got == 0:
		d.add(check, d.node(n), statusFail, fmt.Sprintf("%d replicas connected; WAIT %d confirmed none within %v", have, want, d.e.replicaTimeout),
			"check the replicas' link to the master (INFO replication on each): a failover now would lose operators' changes")
	case int(got) < want:
		d.add(check, d.node(n), statusWarn, fmt.Sprintf("%d replicas connected; WAIT %d confirmed %d within %v", have, want, got, d.e.replicaTimeout),
			"check the lagging replicas' link to the master: a failover to one of them may lose operators' changes")
	default:
		d.add(check, d.node(n), statusOK, fmt.Sprintf("%d replicas connected; WAIT %d confirmed %d within %v", have, want, got, d.e.replicaTimeout), "")
	}
}
