package redistest_test

import (
	"context"
	"sync"
	"testing"

	goredis "github.com/redis/go-redis/v9"

	"github.com/cbgrpc/cbgrpc/internal/redistest"
)

func TestCluster(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := redistest.StartCluster(t)
	cc := c.Client(t)
	for _, k := range []string{"a", "b", "c", "d", "e", "f"} {
		if err := cc.Set(ctx, k, k, 0).Err(); err != nil {
			t.Fatalf("SET %s: %v", k, err)
		}
	}
	var mu sync.Mutex
	masters := 0
	err := cc.ForEachMaster(ctx, func(ctx context.Context, m *goredis.Client) error {
		mu.Lock()
		defer mu.Unlock()
		masters++
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if masters != 3 {
		t.Errorf("cluster has %d masters, want 3", masters)
	}
}

func TestClusterFailoverSlotOf(t *testing.T) {
	t.Parallel()
	c := redistest.StartClusterWithReplicas(t)
	cc := c.Client(t)
	mustSet(t, cc, "k", "before")
	master, replica := c.MasterOf(t, "k"), c.ReplicaOf(t, "k")
	if replica == nil {
		t.Fatalf("master %s of k has no replica", master.Addr())
	}

	c.FailoverSlotOf(t, "k")
	if got := c.MasterOf(t, "k"); got != replica {
		t.Errorf("after failover the master of k is %s, want the former replica %s", got.Addr(), replica.Addr())
	}
	if got := c.ReplicaOf(t, "k"); got != master {
		t.Errorf("after failover the former master %s does not replicate k's slot", master.Addr())
	}
	mustGet(t, cc, "k", "before")
	mustSet(t, cc, "k", "after")
	mustGet(t, replica.Client(t), "k", "after")
}
