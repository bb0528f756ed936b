package redis

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"syscall"

	goredis "github.com/redis/go-redis/v9"

	"github.com/cbgrpc/cbgrpc/coordinator"
)

var (
	_ coordinator.Checker    = (*Coordinator)(nil)
	_ coordinator.ErrorKinds = (*Coordinator)(nil)
)

//go:embed check.lua
var checkLua string

var checkScript = goredis.NewScript(checkLua)

// errReplica is what Check finds on a node whose INFO says it replicates
// another: its scripts would fail with READONLY once they write.
var errReplica = errors.New("INFO replication says role:slave")

// errRefused is what Check finds when the ACL refuses commands the
// operations' scripts run.
var errRefused = errors.New("NOPERM the ACL refuses commands the scripts run")

// Check implements [coordinator.Checker] on the node that holds the fleet
// default's policy (on a Redis Cluster, the master the client maps its
// slot to; other masters are only asked their version): it dials the
// node, then sends PING, INFO replication (the node must be a master),
// learns on a Cluster whether every master has sharded pub/sub
// (features.go), and runs a script that reads that key, as the operations
// do, and tries every command their scripts run (check.lua). It leaves
// nothing written. The error names the cause: the node cannot be reached,
// the credentials are refused, the user lacks a grant (see
// docs/redis-acl.md), the node is a replica, or it is loading its data.
func (c *Coordinator) Check(ctx context.Context) error {
	key, _ := fleetKeys(c.prefix)
	scratch, channel := checkKeys(c.prefix)
	node, addr, err := c.checkNode(ctx, key)
	if err != nil {
		return checkError(addr, err)
	}
	// A go-redis client retries a refused dial until the context ends and
	// then reports only the deadline: dialing once tells why.
	if err := dial(ctx, node, addr); err != nil {
		return checkError(addr, err)
	}
	var rdb interface {
		goredis.Scripter
		Ping(context.Context) *goredis.StatusCmd
		InfoMap(context.Context, ...string) *goredis.InfoCmd
	} = c.client
	if node != nil {
		rdb = node
	}
	if err := rdb.Ping(ctx).Err(); err != nil {
		return checkError(addr, err)
	}
	info, err := rdb.InfoMap(ctx, "replication").Result()
	if err != nil {
		return checkError(addr, err)
	}
	if role := info["Replication"]["role"]; role != "" && role != "master" {
		return checkError(addr, fmt.Errorf("%w, master %s:%s", errReplica, info["Replication"]["master_host"], info["Replication"]["master_port"]))
	}
	srv, err := c.learn(ctx)
	if err != nil {
		return checkError(addr, err)
	}
	publish := "PUBLISH"
	if srv.sharded {
		publish = "SPUBLISH"
	}
	refused, err := checkScript.Run(ctx, rdb, []string{key, scratch}, channel, publish).StringSlice()
	if err != nil {
		return checkError(addr, err)
	}
	if len(refused) > 0 {
		return checkError(addr, fmt.Errorf("%w: %s", errRefused, strings.Join(refused, ", ")))
	}
	return nil
}

// checkNode returns the client of the node that holds key and its
// address; for a client of another kind (a Ring), nil and "Redis".
func (c *Coordinator) checkNode(ctx context.Context, key string) (*goredis.Client, string, error) {
	switch rdb := c.client.(type) {
	case *goredis.Client:
		return rdb, rdb.Options().Addr, nil
	case *goredis.ClusterClient:
		node, err := rdb.MasterForKey(ctx, key)
		if err != nil {
			addrs := rdb.Options().Addrs
			// The slot map could not be read: a seed that cannot be
			// dialed says why.
			for _, a := range addrs {
				if derr := dialAddr(ctx, nil, "tcp", a); derr != nil {
					return nil, a, derr
				}
			}
			return nil, strings.Join(addrs, ","), err
		}
		return node, node.Options().Addr, nil
	}
	return nil, "Redis", nil
}

// dial opens and closes one connection to node the way its client does.
func dial(ctx context.Context, node *goredis.Client, addr string) error {
	if node == nil {
		return nil
	}
	opt := node.Options()
	return dialAddr(ctx, opt.Dialer, opt.Network, addr)
}

func dialAddr(ctx context.Context, dialer func(context.Context, string, string) (net.Conn, error), network, addr string) error {
	if dialer == nil {
		var d net.Dialer
		dialer = d.DialContext
	}
	if network == "" {
		network = "tcp"
	}
	conn, err := dialer(ctx, network, addr)
	if err != nil {
		return err
	}
	return conn.Close()
}

// checkError says in words what err means for the coordinator at addr.
func checkError(addr string, err error) error {
	var what string
	switch kindOf(err) {
	case coordinator.KindUnreachable:
		what = "cannot reach Redis at " + addr
	case coordinator.KindTimeout:
		what = "Redis at " + addr + " did not answer in time"
	case coordinator.KindAuth:
		what = "Redis at " + addr + " refused the credentials (WRONGPASS/NOAUTH)"
	case coordinator.KindPermission:
		what = "the Redis user may not run what the coordinator needs (NOPERM): see docs/redis-acl.md for the grant"
	case coordinator.KindReadOnly:
		what = addr + " is a read-only replica, not a master (READONLY)"
	case coordinator.KindLoading:
		what = "Redis at " + addr + " is loading its dataset (LOADING)"
	case coordinator.KindScript:
		what = "Redis at " + addr + " refused the coordinator's script"
	default:
		what = "Redis at " + addr + " cannot serve"
	}
	return fmt.Errorf("redis coordinator: check: %s: %w", what, err)
}

// ErrorKind implements [coordinator.ErrorKinds] for the errors of go-redis
// and Redis; it names none for one scope's unusable data
// ([coordinator.ErrCorruptState]), whose kind the caller knows.
func (c *Coordinator) ErrorKind(err error) string {
	if errors.Is(err, coordinator.ErrCorruptState) {
		return ""
	}
	return kindOf(err)
}

// kindOf names the cause of err: the server's error reply as the table
// of replyErrors reads it, else what the network or go-redis said.
func kindOf(err error) string {
	var netErr net.Error
	switch {
	case err == nil:
		return ""
	case errors.Is(err, errReplica):
		return coordinator.KindReadOnly
	case errors.Is(err, errRefused):
		return coordinator.KindPermission
	}
	switch kind := replyKind(err); kind {
	case "":
	case kindCorrupt:
		// Check's own script failed on what it read.
		return coordinator.KindScript
	default:
		return kind
	}
	switch {
	case errors.Is(err, context.DeadlineExceeded) || errors.As(err, &netErr) && netErr.Timeout():
		return coordinator.KindTimeout
	case errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, io.EOF) ||
		errors.Is(err, goredis.ErrClosed) || errors.As(err, new(*net.OpError)) || errors.As(err, new(*net.DNSError)):
		return coordinator.KindUnreachable
	}
	return ""
}
