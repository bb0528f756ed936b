package main

import (
	"cmp"
	"context"
	"fmt"
	"strconv"
	"strings"

	goredis "github.com/redis/go-redis/v9"
)

// serverVersion is a server's Redis version (Valkey reports the Redis
// version it is compatible with beside its own); zero when unknown.
type serverVersion struct{ major, minor int }

func parseVersion(s string) serverVersion {
	parts := strings.SplitN(s, ".", 3)
	var v serverVersion
	if len(parts) >= 2 {
		v.major, _ = strconv.Atoi(parts[0])
		v.minor, _ = strconv.Atoi(parts[1])
	}
	return v
}

func (v serverVersion) atLeast(major, minor int) bool {
	return v.major > major || v.major == major && v.minor >= minor
}

func (v serverVersion) known() bool { return v.major > 0 }

// features says what the coordinator uses of a server of version v.
func (v serverVersion) features() string {
	if !v.atLeast(6, 0) {
		return "no ACL users (6.0), no SPUBLISH (7.0)"
	}
	if !v.atLeast(7, 0) {
		return "ACL users; no SPUBLISH/SSUBSCRIBE, ACL DRYRUN or ACL checks in scripts (all 7.0)"
	}
	return "ACL users, SPUBLISH/SSUBSCRIBE, ACL DRYRUN, ACL checks in scripts"
}

// checkServer reads INFO server: what server, which version and mode,
// and whether they give what the coordinator uses. It returns the
// version, zero when INFO is refused.
func (d *doctor) checkServer(ctx context.Context, n *goredis.Client) serverVersion {
	const check = "server"
	info, err := n.InfoMap(ctx, "server").Result()
	if err != nil {
		d.add(check, d.node(n), statusFail, "INFO server refused: "+err.Error(),
			"grant +info (docs/redis-acl.md): the feeds' heartbeats read INFO replication")
		return serverVersion{}
	}
	s := info["Server"]
	v := parseVersion(s["redis_version"])
	name := "Redis " + s["redis_version"]
	if s["server_name"] == "valkey" || s["valkey_version"] != "" {
		name = fmt.Sprintf("Valkey %s (Redis %s compatible)", s["valkey_version"], s["redis_version"])
	}
	// Valkey 8 renamed redis_mode.
	mode := cmp.Or(s["redis_mode"], s["server_mode"])
	found := fmt.Sprintf("%s, %s mode: %s", name, mode, v.features())
	_, cluster := d.e.client.(*goredis.ClusterClient)
	switch {
	case mode == "cluster" && !cluster:
		d.add(check, d.node(n), statusFail, found+"; a Cluster node, reached as a single server",
			"give --cluster, and the services a cluster client (goredis.NewClusterClient)")
	case !v.atLeast(6, 2):
		d.add(check, d.node(n), statusWarn, found+"; older than Redis 6.2, the oldest the project supports",
			"upgrade to Redis 6.2 or later")
	case cluster && !v.atLeast(7, 0):
		// The coordinator learns it (coordinator/redis features.go) and
		// publishes with PUBLISH, which every node hears of.
		d.add(check, d.node(n), statusOK, found+"; on this Cluster the coordinator publishes with PUBLISH, which every node relays to its subscribers", "")
	default:
		d.add(check, d.node(n), statusOK, found, "")
	}
	return v
}
