package redis

import (
	"context"
	"fmt"
	"strconv"

	goredis "github.com/redis/go-redis/v9"

	"github.com/cbgrpc/cbgrpc/coordinator"
	"github.com/cbgrpc/cbgrpc/coordinator/implement"
)

var _ coordinator.Controller = (*Coordinator)(nil)

// Isolate implements [coordinator.Controller]. The isolated state and the
// operator's note are kept in the scope's state hash, which never expires
// while isolated.
func (c *Coordinator) Isolate(ctx context.Context, q coordinator.CommandRequest) (coordinator.Result, error) {
	return c.control(ctx, "isolate", q)
}

// Release implements [coordinator.Controller].
func (c *Coordinator) Release(ctx context.Context, q coordinator.CommandRequest) (coordinator.Result, error) {
	return c.control(ctx, "release", q)
}

// Disable implements [coordinator.Controller]. The disabled state never
// expires; its window keeps counting outcomes.
func (c *Coordinator) Disable(ctx context.Context, q coordinator.CommandRequest) (coordinator.Result, error) {
	return c.control(ctx, "disable", q)
}

// Enable implements [coordinator.Controller].
func (c *Coordinator) Enable(ctx context.Context, q coordinator.CommandRequest) (coordinator.Result, error) {
	return c.control(ctx, "enable", q)
}

// control runs control.lua, one script for the four commands, since they
// share every step but the state they set, then waits for the replicas.
// WAIT counts the writes of its own connection, so both run on one
// connection to the master that holds the scope. A client that cannot
// give one (a Ring, a wrapper) runs the script without waiting.
func (c *Coordinator) control(ctx context.Context, op string, q coordinator.CommandRequest) (coordinator.Result, error) {
	scope, p, n := q.Scope, q.Policy, q.Note
	if err := n.Validate(op); err != nil {
		return coordinator.Result{}, opError(op, scope, err)
	}
	args := []any{op, n.By, n.Reason, n.For.Milliseconds(), implement.Describe(n, op)}
	conn, err := c.masterConn(ctx, scopeKeys(c.prefix, scope)[keyState])
	if err != nil {
		return coordinator.Result{}, opError(op, scope, err)
	}
	if conn == nil {
		return c.result(ctx, c.client, controlScript, op, scope, p, implement.Seen(q.Seen), args...)
	}
	defer conn.Close()
	res, err := c.result(ctx, conn, controlScript, op, scope, p, implement.Seen(q.Seen), args...)
	if err != nil {
		cluster, ok := c.client.(*goredis.ClusterClient)
		if _, moved := goredis.IsMovedError(err); ok && moved {
			// The slot has moved: the next command asks its new master.
			cluster.ReloadState(ctx)
		}
		return coordinator.Result{}, err
	}
	if res.Replicas, err = c.waitForReplicas(ctx, conn); err != nil {
		return coordinator.Result{}, opError(op, scope, fmt.Errorf("done on the master, but waiting for its replicas failed: %w", err))
	}
	return res, nil
}

// masterConn returns a connection of its own to the master that holds
// key, or nil when the client cannot give one.
func (c *Coordinator) masterConn(ctx context.Context, key string) (*goredis.Conn, error) {
	switch rdb := c.client.(type) {
	case *goredis.Client: // a single server, or a failover client
		return rdb.Conn(), nil
	case *goredis.ClusterClient:
		node, err := rdb.MasterForKey(ctx, key)
		if err != nil {
			return nil, err
		}
		return node.Conn(), nil
	}
	return nil, nil
}

// waitForReplicas waits for the replicas to acknowledge the writes made on
// conn: [WithReplicas] of them, or as many as the master reports.
func (c *Coordinator) waitForReplicas(ctx context.Context, conn *goredis.Conn) (coordinator.Replication, error) {
	want := c.replicas
	if want == 0 {
		info, err := conn.InfoMap(ctx, "replication").Result()
		if err != nil {
			return coordinator.Replication{}, err
		}
		want = reportedReplicas(info["Replication"])
	}
	if want == 0 {
		return coordinator.Replication{}, nil
	}
	n, err := conn.Wait(ctx, want, c.replicaTimeout).Result()
	if err != nil {
		return coordinator.Replication{}, err
	}
	return coordinator.Replication{Wanted: want, Confirmed: int(n)}, nil
}

// reportedReplicas is how many replicas a master's INFO replication says
// it has: those connected, or one when it has none but keeps a replication
// backlog. A master keeps its backlog for repl-backlog-ttl (an hour by
// default) after its last replica left, so that one shows a replica whose
// link has just broken (paused, partitioned, restarting): Sentinel may
// still promote it, and the change it lacks would be lost. A server that
// never had a replica has no backlog, and nothing to wait for.
func reportedReplicas(info map[string]string) int {
	n, _ := strconv.Atoi(info["connected_slaves"])
	if n == 0 && info["repl_backlog_active"] == "1" {
		return 1
	}
	return n
}
