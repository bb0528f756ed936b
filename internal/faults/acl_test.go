package faults

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/cbgrpc/cbgrpc/coordinator"
	"github.com/cbgrpc/cbgrpc/coordinator/coordinatortest"
	cbredis "github.com/cbgrpc/cbgrpc/coordinator/redis"
	"github.com/cbgrpc/cbgrpc/internal/redistest"
)

// aclGrant is the grant docs/redis-acl.md documents.
const aclGrant = redistest.ACLGrant

// aclClusterGrant adds what a cluster client reads at start: the slots,
// and the commands' key positions.
const aclClusterGrant = aclGrant + " +cluster|slots +command"

// setUser creates the user cbgrpc with exactly grant on s.
func setUser(t *testing.T, s *redistest.Server, grant string) {
	t.Helper()
	s.SetUser(t, "cbgrpc", "cbgrpc-test", grant)
}

// aclUser creates a user with exactly aclGrant on s and returns a client
// logged in as that user.
func aclUser(t *testing.T, s *redistest.Server) *goredis.Client {
	t.Helper()
	setUser(t, s, aclGrant)
	rdb := goredis.NewClient(&goredis.Options{Addr: s.Addr(), Username: "cbgrpc", Password: "cbgrpc-test"})
	t.Cleanup(func() { rdb.Close() })
	return rdb
}

// factory makes coordinators under the default prefix, as the grant's key
// pattern expects, each subtest under its own.
func factory(rdb goredis.UniversalClient) coordinatortest.Factory {
	var n atomic.Int64
	return func(t *testing.T, clock func() time.Time) coordinator.Coordinator {
		return cbredis.New(rdb, cbredis.WithClock(clock), cbredis.WithPrefix(fmt.Sprintf("%st%d:", cbredis.DefaultPrefix, n.Add(1))))
	}
}

// TestConformanceWithMinimalACL runs the coordinator conformance suite
// (every rule, and the differential comparison with the memory
// coordinator) as a Redis user holding only the documented grant.
func TestConformanceWithMinimalACL(t *testing.T) {
	coordinatortest.Run(t, factory(aclUser(t, redistest.Start(t))))
}

// TestConformanceWithMinimalACLOnCluster: the same on a Redis Cluster, with
// the one more command a cluster client needs.
func TestConformanceWithMinimalACLOnCluster(t *testing.T) {
	cluster := redistest.StartCluster(t)
	for _, n := range cluster.Nodes {
		setUser(t, n, aclClusterGrant)
	}
	cc := goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: cluster.Addrs(), Username: "cbgrpc", Password: "cbgrpc-test"})
	t.Cleanup(func() { cc.Close() })
	coordinatortest.Run(t, factory(cc))
}

// TestMinimalACLIsMinimal: the grant allows the coordinator's work and
// nothing else: no other key, no other command.
func TestMinimalACLIsMinimal(t *testing.T) {
	rdb := aclUser(t, redistest.Start(t))
	ctx := context.Background()
	p := coordinator.DefaultPolicy()
	// With the server's clock (TIME), as in production.
	c := cbredis.New(rdb)
	if _, err := c.Admit(ctx, coordinator.AdmitRequest{Scope: "s", Policy: p, Claim: "claim"}); err != nil {
		t.Fatalf("Admit as the ACL user: %v", err)
	}
	if _, err := c.Record(ctx, coordinator.RecordRequest{Scope: "s", Policy: p, Outcomes: []coordinator.Outcome{{Failure: true}}}); err != nil {
		t.Fatalf("Record as the ACL user: %v", err)
	}
	// Outside the key pattern, the same scripts are refused.
	if _, err := cbredis.New(rdb, cbredis.WithPrefix("other:")).Admit(ctx, coordinator.AdmitRequest{Scope: "s", Policy: p, Claim: "claim"}); err == nil || !strings.Contains(err.Error(), "NOPERM") {
		t.Errorf("Admit under prefix other: = %v, want NOPERM", err)
	}
	for _, cmd := range [][]any{{"GET", "cbgrpc:x"}, {"KEYS", "*"}, {"FLUSHALL"}, {"CONFIG", "GET", "maxmemory"}, {"SCRIPT", "FLUSH"}} {
		if err := rdb.Do(ctx, cmd...).Err(); err == nil || !strings.Contains(err.Error(), "NOPERM") {
			t.Errorf("%v as the ACL user: %v, want NOPERM", cmd, err)
		}
	}
}

// TestMinimalACLFeed: under the grant, a feed's heartbeats go out (their
// script reads INFO replication) and the feed lives past its silence
// bound; without +info, the feed is lost, and the loss says why.
func TestMinimalACLFeed(t *testing.T) {
	const period = 20 * time.Millisecond
	s := redistest.Start(t)
	rdb := aclUser(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	watch := func(t *testing.T) (*cbredis.Coordinator, coordinator.Watch) {
		c := cbredis.New(rdb, cbredis.WithHeartbeat(period))
		w, err := c.Watch(ctx)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { w.Close() })
		if err := w.Follow(ctx, "s"); err != nil {
			t.Fatal(err)
		}
		return c, w
	}
	t.Run("granted", func(t *testing.T) {
		c, w := watch(t)
		time.Sleep(10 * period) // three periods of silence lose a feed
		p := coordinator.DefaultPolicy()
		if _, err := c.Isolate(ctx, coordinator.CommandRequest{Scope: "s", Policy: p, Note: coordinator.Note{By: "test", Reason: "acl"}}); err != nil {
			t.Fatal(err)
		}
		tr, err := w.Next(ctx)
		if err != nil || tr.To != coordinator.StateIsolated {
			t.Fatalf("Next = %+v, %v; want the isolation", tr, err)
		}
	})
	t.Run("without +info", func(t *testing.T) {
		setUser(t, s, strings.Replace(aclGrant, "+info ", "", 1))
		_, w := watch(t)
		_, err := w.Next(ctx)
		if !errors.Is(err, coordinator.ErrFeedLost) || !strings.Contains(err.Error(), "the ACL refused the heartbeat script") {
			t.Fatalf("Next = %v; want a lost feed that says the script was refused", err)
		}
		t.Log(err)
	})
}
