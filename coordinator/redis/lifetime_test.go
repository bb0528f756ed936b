package redis_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/cbgrpc/cbgrpc/coordinator"
	cbredis "github.com/cbgrpc/cbgrpc/coordinator/redis"
	"github.com/cbgrpc/cbgrpc/internal/redistest"
)

// TestClosedKeysOutliveTheirState: a closed scope's keys get their
// lifetime once a window rather than on every write, so after any write
// every key must still have one, long enough for the state to be
// forgotten first, whatever was lost in between (the window key); and once
// writes stop, the keys go.
func TestClosedKeysOutliveTheirState(t *testing.T) {
	ctx := context.Background()
	rdb := redistest.Start(t).Client(t)
	c := cbredis.New(rdb)
	p := coordinator.Policy{Window: 300 * time.Millisecond, Buckets: 3, MinCalls: 1000, FailureRatio: 0.5,
		OpenFor: time.Second, Probes: 1, ProbeLease: time.Second, ProbeSuccesses: 1}
	gen := born(t, c, "s", p)
	lost := map[string]int{}
	refreshed := 0
	var lastTTL time.Duration
	for i := range 60 {
		keys := scopeKeys(t, rdb, cbredis.DefaultPrefix)
		if i%7 == 3 { // lose a key other than the state: an eviction
			for _, k := range keys {
				if suffix := k[strings.LastIndexByte(k, ':')+1:]; suffix == "window" {
					rdb.Del(ctx, k)
					lost[suffix]++
				}
			}
		}
		res, err := c.Record(ctx, coordinator.RecordRequest{Scope: "s", Policy: p, Outcomes: []coordinator.Outcome{{Generation: gen}}, BatchID: fmt.Sprint("b", i)})
		if err != nil || res.State != coordinator.StateClosed {
			t.Fatalf("Record %d: %+v, %v", i, res, err)
		}
		gen = res.Generation
		keys = scopeKeys(t, rdb, cbredis.DefaultPrefix)
		state := ""
		for _, k := range keys {
			if strings.HasSuffix(k, ":state") {
				state = k
			}
		}
		expires, err := rdb.HGet(ctx, state, "expires_at").Int64()
		if err != nil {
			t.Fatalf("HGET %s expires_at: %v", state, err)
		}
		now := time.Now().UnixMilli()
		for _, k := range keys {
			ttl := rdb.PTTL(ctx, k).Val()
			if ttl <= 0 {
				t.Fatalf("write %d: PTTL %s = %v; want a lifetime", i, k, ttl)
			}
			if left := time.Duration(expires-now) * time.Millisecond; ttl < left {
				t.Fatalf("write %d: PTTL %s = %v; want it to outlive the state, kept %v more", i, k, ttl, left)
			}
			if strings.HasSuffix(k, ":state") {
				if ttl > lastTTL+10*time.Millisecond {
					refreshed++
				}
				lastTTL = ttl
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	// 60 writes 20ms apart over a 300ms window: the lifetime was set
	// again about once a window, not on every write.
	t.Logf("lifetime set %d times in 60 writes; keys lost and restored %v", refreshed, lost)
	if refreshed == 0 || refreshed > 30 {
		t.Errorf("lifetime set %d times in 60 writes; want about once a window (300ms), not every write", refreshed)
	}
	deadline := time.Now().Add(p.Window*2 + 2*time.Second)
	for len(scopeKeys(t, rdb, cbredis.DefaultPrefix)) > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("keys %q still there %v after the last write", scopeKeys(t, rdb, cbredis.DefaultPrefix), p.Window*2+2*time.Second)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestIdleScopesKeysHaveLifetimes: what the memory coordinator's sweep
// does for it, Redis does by key lifetimes, with no operation to come.
// Every key that scopes left after a failed call from a replica (its
// reporters, its replica's row, the policy it carried) expires within
// two windows and the margin of collection.
func TestIdleScopesKeysHaveLifetimes(t *testing.T) {
	ctx := context.Background()
	rdb := redistest.Start(t).Client(t)
	c := cbredis.New(rdb)
	p := coordinator.DefaultPolicy()
	const idle = 200
	for i := range idle {
		scope := fmt.Sprint("idle/", i)
		gen := born(t, c, scope, p)
		if _, err := c.Record(ctx, coordinator.RecordRequest{Scope: scope, Policy: p, Replica: "replica-1", BatchID: scope,
			Outcomes: []coordinator.Outcome{{Generation: gen, Failure: true, Duration: time.Millisecond}}}); err != nil {
			t.Fatal(err)
		}
	}
	keys := scopeKeys(t, rdb, cbredis.DefaultPrefix)
	if len(keys) != 2*idle {
		t.Errorf("%d keys for %d closed scopes; want a state and a window each: %q", len(keys), idle, keys[:min(len(keys), 6)])
	}
	most := 2*p.Window + time.Second
	for _, k := range keys {
		if ttl := rdb.PTTL(ctx, k).Val(); ttl <= 0 || ttl > most {
			t.Errorf("PTTL %s = %v; want a lifetime of at most %v", k, ttl, most)
		}
	}
}
