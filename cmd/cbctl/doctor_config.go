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

// inInfo is where INFO reports each parameter doctor reads: its section
// and field, on every server from Redis 6.2.
var inInfo = map[string][2]string{
	"maxmemory-policy": {"memory", "maxmemory_policy"},
	"maxmemory":        {"memory", "maxmemory"},
	"maxclients":       {"clients", "maxclients"},
}

// setting reads one parameter with CONFIG GET or, where CONFIG is refused
// (ElastiCache, Memorystore and Azure restrict it, and the grant of
// docs/redis-acl.md leaves it out), from INFO. from says which answered:
// "" for CONFIG, else the INFO section.
func setting(ctx context.Context, n *goredis.Client, name string) (value, from string, err error) {
	v, err := configGet(ctx, n, name)
	if err == nil {
		return v, "", nil
	}
	at := inInfo[name]
	sections, ierr := n.InfoMap(ctx, at[0]).Result()
	if ierr != nil {
		return "", "", fmt.Errorf("%w; INFO %s: %v", err, at[0], ierr)
	}
	for section, fields := range sections {
		if v, ok := fields[at[1]]; ok && strings.EqualFold(section, at[0]) {
			return v, "INFO " + at[0], nil
		}
	}
	return "", "", fmt.Errorf("%w; INFO %s has no %s", err, at[0], at[1])
}

// readFrom is what a finding says of where a setting was read, when
// CONFIG was refused.
func readFrom(from string) string {
	if from == "" {
		return ""
	}
	return " (read from " + from + ": CONFIG refused)"
}

// checkEviction warns about a maxmemory-policy that may evict any key:
// an open breaker's keys never expire, and once evicted the fleet trips
// again only from fresh failures.
func (d *doctor) checkEviction(ctx context.Context, n *goredis.Client) {
	const check = "maxmemory-policy"
	policy, from, err := setting(ctx, n, "maxmemory-policy")
	if err != nil {
		d.add(check, d.node(n), statusWarn, "could not be checked: "+err.Error(),
			"look the eviction policy up where the server is configured (a managed service's console): it must not be allkeys-*")
		return
	}
	limit := ""
	if m, _, err := setting(ctx, n, "maxmemory"); err == nil {
		limit = ", maxmemory " + m
		if m == "0" {
			limit += " (no limit yet)"
		}
	}
	limit += readFrom(from)
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
	v, from, err := setting(ctx, n, "maxclients")
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
	room := fmt.Sprintf("maxclients %d%s: room for %d replicas at %d connections each (docs/redis.md)", max, readFrom(from), max/connectionsPerReplica, connectionsPerReplica)
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
