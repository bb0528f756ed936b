package redistest_test

import (
	"context"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/cbgrpc/cbgrpc/internal/redistest"
)

func TestSentinelFailoverKeepsWrites(t *testing.T) {
	t.Parallel()
	s := redistest.StartSentinel(t)
	rdb := s.FailoverClient(t)
	first, second := s.Master(), s.Replica()
	mustSet(t, rdb, "k", "before")

	s.Failover(t)
	if s.Master() != second || s.Replica() != first {
		t.Fatalf("after a failover master %s, replica %s; want them swapped", s.Master().Addr(), s.Replica().Addr())
	}
	mustGet(t, rdb, "k", "before")
	mustSet(t, rdb, "k", "after")

	// The demoted master is a replica in sync: it can take over again.
	s.Failover(t)
	if s.Master() != first {
		t.Fatalf("after failing back master %s, want %s", s.Master().Addr(), first.Addr())
	}
	mustGet(t, rdb, "k", "after")
}

func TestSentinelLossyFailoverLosesWrites(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := redistest.StartSentinel(t)
	rdb := s.FailoverClient(t)
	old := s.Master()
	mustSet(t, rdb, "kept", "v")

	s.CutReplication(t)
	conn := rdb.Conn()
	defer conn.Close()
	mustSet(t, conn, "lost", "v")
	mustWait(t, conn, 50*time.Millisecond, 0)

	s.LossyFailover(t)
	if s.Replica() != old {
		t.Fatalf("after a lossy failover the replica is %s, want the old master %s", s.Replica().Addr(), old.Addr())
	}
	mustGet(t, rdb, "kept", "v")
	for _, c := range []goredis.Cmdable{rdb, old.Client(t)} {
		if n, err := c.Exists(ctx, "lost").Result(); err != nil || n != 0 {
			t.Errorf("EXISTS lost = %d, %v; want the write made after the cut lost everywhere", n, err)
		}
	}
	mustSet(t, rdb, "k", "after")
}

func TestCutReplicationHealsOnResume(t *testing.T) {
	t.Parallel()
	s := redistest.StartSentinel(t)
	conn := s.FailoverClient(t).Conn()
	defer conn.Close()

	s.CutReplication(t)
	mustSet(t, conn, "k", "v")
	mustWait(t, conn, 50*time.Millisecond, 0)
	s.Replica().Resume()
	mustWait(t, conn, 10*time.Second, 1)
	mustGet(t, s.Replica().Client(t), "k", "v")
}

// mustWait checks how many replicas acknowledge the writes made on conn
// within timeout.
func mustWait(t *testing.T, conn *goredis.Conn, timeout time.Duration, want int64) {
	t.Helper()
	if n, err := conn.Wait(context.Background(), 1, timeout).Result(); err != nil || n != want {
		t.Fatalf("WAIT = %d, %v; want %d replicas", n, err, want)
	}
}
