package redis

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	goredis "github.com/redis/go-redis/v9"

	"github.com/cbgrpc/cbgrpc/coordinator"
)

// scanCount is the COUNT hint of each SCAN: how many keys Redis looks at
// per call, a trade between round trips and how long one call blocks the
// server.
const scanCount = 1000

var _ coordinator.Lister = (*Coordinator)(nil)

// List returns a snapshot, as of now, of every scope that has state under
// the coordinator's prefix, sorted by scope. Scopes that are not born
// (forgotten after an idle window, or whose state hash was lost) are left
// out. p gives the window the counts are read over: pass the policy the
// fleet uses. A scope whose snapshot fails with [coordinator.ErrCorruptState]
// (a key of the wrong type, junk in a field) is listed with that error in
// Snapshot.Corrupt; any other error fails the listing. A state hash that
// is itself no hash is not found: SCAN keeps to hashes, and the readable
// scope is a field of it.
//
// List finds scopes with SCAN MATCH <prefix>v2:{*}:state TYPE hash (on a
// Redis Cluster, on every master), reads the readable scope each state
// hash keeps, and takes one snapshot per scope. Its cost grows with the
// whole keyspace of the database, not with the number of scopes: SCAN
// visits every key, in pages of 1000 that each block the server only
// briefly, then one HGET per state key (pipelined per page) and one script
// call per scope. It is an operator's tool, not something to call per
// request. A scope created or dropped while List runs may be missed or
// reported; none is reported twice.
//
// Why not an index kept by the scripts: on a Redis Cluster one key holding
// every scope would sit in one slot, and a script may only touch keys of
// the slot its scope hashes to; keeping it would also add a write to the
// closed Admit path, which writes nothing.
func (c *Coordinator) List(ctx context.Context, p coordinator.Policy) ([]coordinator.Snapshot, error) {
	if err := p.Validate(); err != nil {
		return nil, fmt.Errorf("redis coordinator: list: %w", err)
	}
	var (
		mu     sync.Mutex
		scopes = map[string]bool{}
	)
	scan := func(ctx context.Context, node goredis.UniversalClient) error {
		found, err := c.scanScopes(ctx, node)
		mu.Lock()
		defer mu.Unlock()
		for _, s := range found {
			scopes[s] = true
		}
		return err
	}
	var err error
	if cc, ok := c.client.(*goredis.ClusterClient); ok {
		err = cc.ForEachMaster(ctx, func(ctx context.Context, node *goredis.Client) error { return scan(ctx, node) })
	} else {
		err = scan(ctx, c.client)
	}
	if err != nil {
		return nil, fmt.Errorf("redis coordinator: list: %w", err)
	}
	sorted := make([]string, 0, len(scopes))
	for s := range scopes {
		sorted = append(sorted, s)
	}
	slices.Sort(sorted)
	out := make([]coordinator.Snapshot, 0, len(sorted))
	for _, scope := range sorted {
		s, err := c.Snapshot(ctx, scope, p)
		switch {
		case errors.Is(err, coordinator.ErrCorruptState):
			out = append(out, coordinator.Snapshot{Scope: scope, Corrupt: err})
		case err != nil:
			return nil, err
		case s.Generation != 0:
			out = append(out, s)
		}
	}
	return out, nil
}

// scanScopes returns the scopes of the state hashes on one node.
func (c *Coordinator) scanScopes(ctx context.Context, node goredis.UniversalClient) ([]string, error) {
	match := globEscape(c.prefix) + layout + ":{*" + stateSuffix
	var scopes []string
	var cursor uint64
	for {
		keys, next, err := node.ScanType(ctx, cursor, match, scanCount, "hash").Result()
		if err != nil {
			return scopes, err
		}
		if len(keys) > 0 {
			cmds, err := node.Pipelined(ctx, func(pipe goredis.Pipeliner) error {
				for _, k := range keys {
					pipe.HGet(ctx, k, "scope")
				}
				return nil
			})
			if err != nil && err != goredis.Nil {
				return scopes, err
			}
			for i, cmd := range cmds {
				scope, err := cmd.(*goredis.StringCmd).Result()
				// A key that expired since SCAN saw it, or one that is not
				// ours, has no scope; a scope's own keys hash to its key.
				if err == nil && scopeKeys(c.prefix, scope)[keyState] == keys[i] {
					scopes = append(scopes, scope)
				}
			}
		}
		if next == 0 {
			return scopes, nil
		}
		cursor = next
	}
}

// globEscape quotes the characters SCAN MATCH treats as a pattern.
func globEscape(s string) string {
	var b strings.Builder
	for _, r := range s {
		if strings.ContainsRune(`*?[]\`, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}
