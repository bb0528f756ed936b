package redistest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"

	goredis "github.com/redis/go-redis/v9"
)

// masterName is the name the Sentinel monitors its master under.
const masterName = "cbgrpc"

// sentinelSettings make a failover fast and keep it the test's decision: a
// master paused for less than down-after-milliseconds is not failed over
// behind the test's back, and SENTINEL FAILOVER does not wait for it.
var sentinelSettings = []string{
	"down-after-milliseconds", "5000",
	"failover-timeout", "5000",
}

// Sentinel is a master, one replica and one Sentinel (quorum 1) that
// monitors them under [Sentinel.MasterName]: the smallest deployment with
// failover. The servers swap roles on every failover.
type Sentinel struct {
	sentinel *Server
	sc       *goredis.SentinelClient

	mu              sync.Mutex
	master, replica *Server
}

// StartSentinel starts a master, a replica in sync with it and a Sentinel
// monitoring them, and returns once the Sentinel knows the replica, so a
// failover can start at once.
func StartSentinel(t testing.TB) *Sentinel {
	t.Helper()
	s := &Sentinel{master: Start(t), replica: Start(t)}
	replicate(t, s.replica, s.master)
	s.sentinel = start(t, sentinelNode)
	s.sc = goredis.NewSentinelClient(adminOptions(s.sentinel.Addr()))
	t.Cleanup(func() { s.sc.Close() })

	ctx := context.Background()
	host, port, _ := net.SplitHostPort(s.master.Addr())
	if err := s.sc.Monitor(ctx, masterName, host, port, "1").Err(); err != nil {
		t.Fatalf("redistest: SENTINEL MONITOR %s: %v", s.master.Addr(), err)
	}
	for i := 0; i < len(sentinelSettings); i += 2 {
		if err := s.sc.Set(ctx, masterName, sentinelSettings[i], sentinelSettings[i+1]).Err(); err != nil {
			t.Fatalf("redistest: SENTINEL SET %s %s: %v", sentinelSettings[i], sentinelSettings[i+1], err)
		}
	}
	waitFor(t, waitTimeout, "Sentinel to know replica "+s.replica.Addr(), func(ctx context.Context) error {
		replicas, err := s.sc.Replicas(ctx, masterName).Result()
		if err != nil {
			return fmt.Errorf("SENTINEL REPLICAS: %w", err)
		}
		for _, r := range replicas {
			if r["name"] == s.replica.Addr() && r["flags"] == "slave" && r["master-link-status"] == "ok" {
				return nil
			}
		}
		return fmt.Errorf("SENTINEL REPLICAS: %v", replicas)
	})
	return s
}

// MasterName is the name the Sentinel monitors the master under.
func (s *Sentinel) MasterName() string { return masterName }

// SentinelAddrs are the Sentinels' addresses.
func (s *Sentinel) SentinelAddrs() []string { return []string{s.sentinel.Addr()} }

// Master is the server that is master now.
func (s *Sentinel) Master() *Server {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.master
}

// Replica is the server that is replica now.
func (s *Sentinel) Replica() *Server {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.replica
}

// FailoverClient returns a client that finds the master through the
// Sentinel and follows it across failovers, closed by t.Cleanup.
func (s *Sentinel) FailoverClient(t testing.TB) *goredis.Client {
	t.Helper()
	c := goredis.NewFailoverClient(&goredis.FailoverOptions{
		MasterName:    masterName,
		SentinelAddrs: s.SentinelAddrs(),
	})
	t.Cleanup(func() { c.Close() })
	return c
}

// Failover waits until the replica has every write the master had
// acknowledged, has the Sentinel promote it with SENTINEL FAILOVER, and
// returns once the Sentinel reports it, it accepts writes and the old
// master replicates it in sync. Both servers must be running. Writes
// racing with Failover may be lost, as in production.
//
// The old master is demoted by Failover itself: the Sentinel would do it
// only some 10 s later, leaving a master that still takes writes.
func (s *Sentinel) Failover(t testing.TB) {
	t.Helper()
	old, next := s.Master(), s.Replica()
	catchUp(t, next, old)
	s.promote(t, old, next)
	replicate(t, old, next)
	s.swap()
}

// CutReplication stops the replica (SIGSTOP) once it has caught up, and
// closes its link on the master: from then on, writes the master
// acknowledges reach no replica, and WAIT counts none. [Sentinel.LossyFailover]
// then loses them; Replica().Resume() instead heals the cut: the replica
// reconnects within a second and catches up.
//
// Pausing the replica alone would not do: its kernel keeps receiving the
// stream, and it applies what it received once resumed, even if the master
// has died.
func (s *Sentinel) CutReplication(t testing.TB) {
	t.Helper()
	master, replica := s.Master(), s.Replica()
	catchUp(t, replica, master)
	replica.Pause()
	err := master.rdb.ClientKillByFilter(context.Background(), "TYPE", "replica").Err()
	if err != nil {
		t.Fatalf("redistest: CLIENT KILL TYPE replica on %s: %v", master.Addr(), err)
	}
}

// LossyFailover fails over to a replica cut off by
// [Sentinel.CutReplication], so every write acknowledged since the cut is
// lost: the master is paused (a partition), the replica resumed and
// promoted, then the old master resumed and demoted. Its full
// resynchronisation with the new master discards what only it had.
// Clients of the old master hang until it is demoted, then get READONLY.
func (s *Sentinel) LossyFailover(t testing.TB) {
	t.Helper()
	old, next := s.Master(), s.Replica()
	if !next.isPaused() {
		t.Fatalf("redistest: LossyFailover: replica %s is running: call CutReplication first", next.Addr())
	}
	// A running master would serve the replica, reconnecting as soon as it
	// resumes, the very writes it must lose.
	old.Pause()
	next.Resume()
	s.promote(t, old, next)
	old.Resume()
	replicate(t, old, next)
	s.swap()
}

// promote asks the Sentinel to fail over from old to next until it reports
// next as master and next accepts writes.
func (s *Sentinel) promote(t testing.TB, old, next *Server) {
	t.Helper()
	what := fmt.Sprintf("Sentinel to fail over from %s to %s", old.Addr(), next.Addr())
	waitFor(t, waitTimeout, what, func(ctx context.Context) error {
		addr, err := s.sc.GetMasterAddrByName(ctx, masterName).Result()
		if err != nil {
			return fmt.Errorf("SENTINEL GET-MASTER-ADDR-BY-NAME: %w", err)
		}
		switch master := net.JoinHostPort(addr[0], addr[1]); master {
		case next.Addr():
			// DEL is refused with READONLY on a replica and leaves no data.
			if err := next.rdb.Del(ctx, "redistest:writable").Err(); err != nil {
				return fmt.Errorf("%s does not accept writes yet: %w", next.Addr(), err)
			}
			return nil
		case old.Addr():
			// Asked again until it starts: NOGOODSLAVE while the Sentinel has
			// not yet seen the replica healthy, INPROG once it runs.
			err := s.sc.Failover(ctx, masterName).Err()
			if err != nil && !strings.HasPrefix(err.Error(), "INPROG") {
				return fmt.Errorf("SENTINEL FAILOVER: %w", err)
			}
			return errors.New("failover in progress")
		default:
			return fmt.Errorf("Sentinel reports master %s", master)
		}
	})
}

func (s *Sentinel) swap() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.master, s.replica = s.replica, s.master
}
