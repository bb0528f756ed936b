package redis

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/cbgrpc/cbgrpc/coordinator"
	"github.com/cbgrpc/cbgrpc/coordinator/coordinatortest"
	"github.com/cbgrpc/cbgrpc/internal/redistest"
)

// clusterScopes returns scopes whose keys land on every master of the
// cluster, and scopes full of braces.
func clusterScopes(t *testing.T, c *redistest.Cluster) []string {
	t.Helper()
	cc := c.Client(t)
	ctx := context.Background()
	byNode := map[string]string{}
	for i := 0; len(byNode) < len(c.Nodes); i++ {
		if i > 1000 {
			t.Fatalf("no scope lands on some node: %v", byNode)
		}
		scope := fmt.Sprintf("svc-%d/pkg.Service/Method", i)
		node, err := cc.MasterForKey(ctx, scopeKeys(DefaultPrefix, scope)[keyState])
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := byNode[node.Options().Addr]; !ok {
			byNode[node.Options().Addr] = scope
		}
	}
	scopes := []string{"{", "}", "{}", "}{", "a{b}c", "{cbgrpc:x}"}
	for _, s := range byNode {
		scopes = append(scopes, s)
	}
	return scopes
}

// TestCluster runs a breaker through closed, open, half-open and closed
// again on a three-node cluster, for scopes on every node, and checks that
// each scope's keys sit on one node.
func TestCluster(t *testing.T) {
	cluster := redistest.StartCluster(t)
	cc := cluster.Client(t)
	ctx := context.Background()
	clock := coordinatortest.NewClock()
	c := New(cc, WithClock(clock.Now))
	p := coordinator.Policy{
		Window: 10 * time.Second, Buckets: 10, MinCalls: 4, FailureRatio: 0.5,
		OpenFor: time.Second, MaxOpenFor: 4 * time.Second,
		Probes: 1, ProbeLease: time.Second, ProbeSuccesses: 1,
	}
	for _, scope := range clusterScopes(t, cluster) {
		t.Run(fmt.Sprintf("%q", scope), func(t *testing.T) {
			d, err := c.Admit(ctx, coordinator.AdmitRequest{Scope: scope, Policy: p, Claim: "born"})
			if err != nil {
				t.Fatal(err)
			}
			g := d.Generation
			res, err := c.Record(ctx, coordinator.RecordRequest{Scope: scope, Policy: p, Outcomes: []coordinator.Outcome{{Generation: g}, {Generation: g, Failure: true}, {Generation: g}, {Generation: g, Failure: true}}, BatchID: "b1"})
			if err != nil {
				t.Fatal(err)
			}
			tr := res.Transition
			if tr == nil || tr.To != coordinator.StateOpen || tr.Reason != "failures 2/4 >= 50%" || tr.Scope != scope {
				t.Fatalf("Record = %+v, %+v; want a trip on 2/4", res, tr)
			}
			k := scopeKeys(DefaultPrefix, scope)
			node, err := cc.MasterForKey(ctx, k[keyState])
			if err != nil {
				t.Fatal(err)
			}
			if n := node.Exists(ctx, k[keyState], k[keyWindow]).Val(); n != 2 {
				t.Fatalf("%d of state and window keys on %s, want both", n, node.Options().Addr)
			}
			if got := node.HGet(ctx, k[keyState], "scope").Val(); got != scope {
				t.Fatalf("state hash holds scope %q", got)
			}

			clock.Advance(p.OpenFor)
			d, err = c.Admit(ctx, coordinator.AdmitRequest{Scope: scope, Policy: p, Claim: "probe"})
			if err != nil {
				t.Fatal(err)
			}
			if d.Verdict != coordinator.Probe || d.Transition == nil || d.Transition.To != coordinator.StateHalfOpen {
				t.Fatalf("Admit after the open period = %+v", d)
			}
			if d2, _ := c.Admit(ctx, coordinator.AdmitRequest{Scope: scope, Policy: p, Claim: "other"}); d2.Verdict != coordinator.Reject {
				t.Fatalf("second claim = %+v, want Reject", d2)
			}
			res, err = c.Settle(ctx, coordinator.SettleRequest{Scope: scope, Policy: p, Claim: "probe", Outcome: coordinator.Outcome{Generation: d.Generation}})
			if err != nil {
				t.Fatal(err)
			}
			if res.State != coordinator.StateClosed || res.Transition == nil || res.Transition.Reason != "probes succeeded 1/1" {
				t.Fatalf("Settle = %+v", res)
			}
			s, err := c.Snapshot(ctx, scope, p)
			if err != nil {
				t.Fatal(err)
			}
			if s.State != coordinator.StateClosed || s.Generation != res.Generation || s.Scope != scope {
				t.Fatalf("Snapshot = %+v", s)
			}
		})
	}
}
