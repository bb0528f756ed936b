package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	goredis "github.com/redis/go-redis/v9"
)

// connectionsPerReplica is the most connections one replica of a service
// keeps to a Redis server with one busy scope, as docs/redis.md ("What a
// fleet costs Redis") states: two or three, its client's pool and its
// feed's subscription.
const connectionsPerReplica = 3

// configGet reads one parameter with CONFIG GET; managed services disable
// CONFIG, and a least-privilege user may not run it.
func configGet(ctx context.Context, n *goredis.Client, name string) (string, error) {
	m, err := n.ConfigGet(ctx, name).Result()
	if err != nil {
		return "", err
	}
	v, ok := m[name]
	if !ok {
		return "", fmt.Errorf("CONFIG GET %s returned nothing", name)
	}
	return v, nil
}

// checkEviction warns about a maxmemory-policy that may evict any key:
// an open breaker's keys never expire, and once evicted the fleet trips
// again only from fresh failures.
func (d *doctor) checkEviction(ctx context.Context, n *goredis.Client) {
	const check = "maxmemory-policy"
	policy, err := configGet(ctx, n, "maxmemory-policy")
	if err != nil {
		d.add(check, d.node(n), statusWarn, "could not be checked: "+err.Error(),
			"look the eviction policy up where the server is configured (a managed service's console): it must not be allkeys-*")
		return
	}
	limit := ""
	if m, err := configGet(ctx, n, "maxmemory"); err == nil {
		limit = ", maxmemory " + m
		if m == "0" {
			limit += " (no limit yet)"
		}
	}
	if strings.HasPrefix(policy, "allkeys-") {
		d.add(check, d.node(n), statusWarn, policy+limit+": any key may be evicted, an open breaker's too, which never expire",
			"set maxmemory-policy noeviction or a volatile-* policy, or give cbgrpc a Redis of its own")
		return
	}
	d.add(check, d.node(n), statusOK, policy+limit+": keys without a TTL (open breakers') are never evicted", "")
}

// checkMaxclients compares maxclients with the connections --fleet
// replicas keep, connectionsPerReplica each.
func (d *doctor) checkMaxclients(ctx context.Context, n *goredis.Client) {
	const check = "maxclients"
	v, err := configGet(ctx, n, "maxclients")
	if err != nil {
		d.add(check, d.node(n), statusWarn, "could not be checked: "+err.Error(),
			fmt.Sprintf("look maxclients up where the server is configured: it must exceed %d connections per replica of the fleet (docs/redis.md)", connectionsPerReplica))
		return
	}
	max, err := strconv.Atoi(v)
	if err != nil {
		d.add(check, d.node(n), statusWarn, fmt.Sprintf("maxclients %q is not a number", v), "")
		return
	}
	room := fmt.Sprintf("maxclients %d: room for %d replicas at %d connections each (docs/redis.md)", max, max/connectionsPerReplica, connectionsPerReplica)
	need := d.opts.fleet * connectionsPerReplica
	switch {
	case d.opts.fleet == 0:
		d.add(check, d.node(n), statusOK, room+"; give --fleet N to check yours", "")
	case need > max:
		d.add(check, d.node(n), statusFail, fmt.Sprintf("%s; --fleet %d needs %d", room, d.opts.fleet, need),
			fmt.Sprintf("raise maxclients to at least %d (and the server's open-file limit with it)", need))
	case need > max*9/10:
		d.add(check, d.node(n), statusWarn, fmt.Sprintf("%s; --fleet %d needs %d, close to the limit", room, d.opts.fleet, need),
			fmt.Sprintf("raise maxclients above %d, leaving room for the fleet to grow and for operators", need))
	default:
		d.add(check, d.node(n), statusOK, fmt.Sprintf("%s; --fleet %d needs %d", room, d.opts.fleet, need), "")
	}
}
