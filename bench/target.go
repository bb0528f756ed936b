package bench

import (
	"context"
	"fmt"

	goredis "github.com/redis/go-redis/v9"

	"github.com/cbgrpc/cbgrpc/coordinator"
	cbredis "github.com/cbgrpc/cbgrpc/coordinator/redis"
)

// Target is the Redis a simulated fleet runs against: one server, or the
// masters of a Redis Cluster. Its servers must be private to the run: the
// simulator reads their INFO as the fleet's cost and counts every key as
// the fleet's.
type Target struct {
	Addrs   []string
	Cluster bool
}

// client returns a client with go-redis's default options, as a replica
// of a user's service would make it.
func (t Target) client() goredis.UniversalClient {
	if t.Cluster {
		return goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: t.Addrs})
	}
	return goredis.NewClient(&goredis.Options{Addr: t.Addrs[0]})
}

// servers returns a client of each server, to read its INFO and keys.
func (t Target) servers() []*goredis.Client {
	cs := make([]*goredis.Client, len(t.Addrs))
	for i, a := range t.Addrs {
		cs[i] = goredis.NewClient(&goredis.Options{Addr: a})
	}
	return cs
}

// primeScripts has the coordinator's scripts loaded, then empties the
// servers, so that the memory a run adds is the fleet's keys and not the
// script cache. On a cluster, enough scopes to reach every master.
func primeScripts(ctx context.Context, target Target, servers []*goredis.Client) error {
	client := target.client()
	defer client.Close()
	c := cbredis.New(client)
	p := coordinator.DefaultPolicy()
	scopes := 1
	if target.Cluster {
		// A master is missed with probability (1 - 1/masters)^scopes.
		scopes = 32
	}
	for i := range scopes {
		scope := fmt.Sprint("cbfleetsim-prime-", i)
		d, err := c.Admit(ctx, coordinator.AdmitRequest{Scope: scope, Policy: p, Claim: "prime"})
		if err == nil {
			_, err = c.Record(ctx, coordinator.RecordRequest{Scope: scope, Policy: p, Outcomes: []coordinator.Outcome{{Generation: d.Generation}}})
		}
		if err == nil {
			_, err = c.Settle(ctx, coordinator.SettleRequest{Scope: scope, Policy: p, Claim: "prime", Outcome: coordinator.Outcome{Generation: d.Generation}})
		}
		if err == nil {
			_, err = c.Snapshot(ctx, scope, p)
		}
		if err != nil {
			return fmt.Errorf("priming the scripts: %w", err)
		}
	}
	for _, s := range servers {
		if err := s.FlushAll(ctx).Err(); err != nil {
			return fmt.Errorf("FLUSHALL on %s: %w", s.Options().Addr, err)
		}
	}
	return nil
}
