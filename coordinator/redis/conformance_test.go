package redis

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/cbgrpc/cbgrpc/coordinator"
	"github.com/cbgrpc/cbgrpc/coordinator/coordinatortest"
	"github.com/cbgrpc/cbgrpc/internal/redistest"
)

// factory makes coordinators on one Redis, each under its own prefix so
// that subtests never see each other's scopes.
func factory(client goredis.UniversalClient) coordinatortest.Factory {
	var n atomic.Int64
	return func(t *testing.T, clock func() time.Time) coordinator.Coordinator {
		return New(client, WithClock(clock), WithPrefix(fmt.Sprintf("t%d:", n.Add(1))))
	}
}

// loseState deletes the scope's state hash alone, as an eviction would,
// leaving its window, leases and batch IDs.
func loseState(t *testing.T, sut coordinator.Coordinator, scope string) {
	c := sut.(*Coordinator)
	if err := c.client.Del(context.Background(), scopeKeys(c.prefix, scope)[keyState]).Err(); err != nil {
		t.Fatal(err)
	}
}

func TestConformance(t *testing.T) {
	coordinatortest.Run(t, factory(redistest.Start(t).Client(t)))
}

// TestCompareWithLostState checks rule 5 (docs/architecture.md) against the reference: the next
// write after a loss gives birth to the scope above the window's label,
// which lies below now × 1000 once the clock has moved on, so both sides
// agree on every generation.
func TestCompareWithLostState(t *testing.T) {
	coordinatortest.Compare(t, factory(redistest.Start(t).Client(t)), coordinatortest.CompareOptions{
		Seeds: 60, LoseState: loseState,
	})
}

func TestConformanceOnCluster(t *testing.T) {
	coordinatortest.Run(t, factory(redistest.StartCluster(t).Client(t)))
}

func TestListHoldsEveryBornScope(t *testing.T) {
	coordinatortest.ListHoldsEveryBornScope(t, factory(redistest.Start(t).Client(t)))
}

func TestListHoldsEveryBornScopeOnCluster(t *testing.T) {
	coordinatortest.ListHoldsEveryBornScope(t, factory(redistest.StartCluster(t).Client(t)))
}

// TestListWithCorruptScope: a scope whose window key holds a string is
// listed as corrupt, beside the others.
func TestListWithCorruptScope(t *testing.T) {
	coordinatortest.ListWithCorruptScope(t, factory(redistest.Start(t).Client(t)), func(t *testing.T, sut coordinator.Coordinator, scope string) {
		c := sut.(*Coordinator)
		if err := c.client.Set(context.Background(), scopeKeys(c.prefix, scope)[keyWindow], "junk", 0).Err(); err != nil {
			t.Fatal(err)
		}
	})
}
