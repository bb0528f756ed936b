package redistest

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"testing"
)

// replicate makes replica a replica of master and waits until its link is
// up and its first sync done. A demoted master whose data went further
// than master's is resynchronised in full: what only it had is lost.
func replicate(t testing.TB, replica, master *Server) {
	t.Helper()
	host, port, _ := net.SplitHostPort(master.Addr())
	if err := replica.rdb.ReplicaOf(context.Background(), host, port).Err(); err != nil {
		t.Fatalf("redistest: REPLICAOF %s on %s: %v", master.Addr(), replica.Addr(), err)
	}
	what := fmt.Sprintf("%s to replicate %s", replica.Addr(), master.Addr())
	waitFor(t, waitTimeout, what, func(ctx context.Context) error {
		up, err := replica.upstream(ctx)
		if err == nil && up != master.Addr() {
			err = fmt.Errorf("it replicates %q", up)
		}
		return err
	})
}

// upstream returns the address of the master s replicates, once its link is
// up and its first sync done, or "" when s is a master.
func (s *Server) upstream(ctx context.Context) (string, error) {
	info, err := s.replication(ctx)
	if err != nil {
		return "", err
	}
	if info["role"] == "master" {
		return "", nil
	}
	if info["master_link_status"] != "up" || info["master_sync_in_progress"] != "0" {
		return "", fmt.Errorf("%s: link to its master %s:%s is %s, sync in progress %s", s.Addr(),
			info["master_host"], info["master_port"], info["master_link_status"], info["master_sync_in_progress"])
	}
	return net.JoinHostPort(info["master_host"], info["master_port"]), nil
}

// offset returns how far s is in the replication stream: what a master has
// written to it, what a replica has applied.
func (s *Server) offset(ctx context.Context) (int64, error) {
	info, err := s.replication(ctx)
	if err != nil {
		return 0, err
	}
	n, err := strconv.ParseInt(info["master_repl_offset"], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%s: master_repl_offset: %w", s.Addr(), err)
	}
	return n, nil
}

// catchUp waits until replica has applied everything master had written
// when catchUp was called.
func catchUp(t testing.TB, replica, master *Server) {
	t.Helper()
	target, err := master.offset(context.Background())
	if err != nil {
		t.Fatalf("redistest: replication offset: %v", err)
	}
	what := fmt.Sprintf("%s to catch up with %s", replica.Addr(), master.Addr())
	waitFor(t, waitTimeout, what, func(ctx context.Context) error {
		n, err := replica.offset(ctx)
		if err == nil && n < target {
			err = fmt.Errorf("at offset %d of %d", n, target)
		}
		return err
	})
}

func (s *Server) replication(ctx context.Context) (map[string]string, error) {
	info, err := s.rdb.InfoMap(ctx, "replication").Result()
	if err != nil {
		return nil, fmt.Errorf("%s: INFO replication: %w", s.Addr(), err)
	}
	return info["Replication"], nil
}
