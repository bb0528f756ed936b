package main

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/cbgrpc/cbgrpc"
	cbredis "github.com/cbgrpc/cbgrpc/coordinator/redis"
)

// Exit codes of doctor; see the package documentation.
const (
	// exitWarnings: doctor found something to look at, and nothing that
	// keeps the coordinator from working.
	exitWarnings = 6
	// exitFailures: doctor found something the coordinator needs and does
	// not have.
	exitFailures = 7
)

// Statuses of a finding: skip is a check that does not apply here (a
// Cluster's hash tags on a single server), or that the user connected
// cannot make and that other checks made by use.
const (
	statusOK   = "ok"
	statusWarn = "warn"
	statusFail = "FAIL"
	statusSkip = "skip"
)

const doctorHelp = `Checks the Redis the fleet's coordinator uses: the server and its version, the
scripts (EVAL, EVALSHA, TIME and INFO inside them), the coordinator's start-up
check, PUBLISH/SPUBLISH and SUBSCRIBE/SSUBSCRIBE, the replicas and WAIT,
maxmemory-policy, maxclients against --fleet, the round trip against
--coordinator-timeout, on a Cluster the key prefix's hash tags, and the ACL
grant of docs/redis-acl.md (ACL DRYRUN, Redis 7.0). One line per check: ok,
warn (something to look at, or a check that CONFIG or ACL could not make),
FAIL (something the coordinator needs and does not have), or skip (does not
apply here, or was made by use instead). On a Cluster each master is checked.

exit status: 0 healthy (ok and skip only); 6 warnings and no failure; 7 a
failure (an unreachable Redis too); 2 a usage error.
`

// finding is what one check found on one node: Change says what to do
// about a warning or a failure.
type finding struct {
	Check  string `json:"check"`
	Node   string `json:"node,omitempty"`
	Status string `json:"status"`
	Found  string `json:"found"`
	Change string `json:"change,omitempty"`
}

// doctorOptions are doctor's own flags.
type doctorOptions struct {
	fleet        int           // Breakers expected to share the Redis, for maxclients
	coordTimeout time.Duration // the services' coordinator timeout, for the round trip
	user         string        // the ACL user whose grant ACL DRYRUN (GETUSER on Redis 6) checks
}

// doctor is one run of the checks against one deployment.
type doctor struct {
	e        *env
	c        *cbredis.Coordinator
	opts     doctorOptions
	sentinel bool // the master was found through Sentinels
	findings []finding
}

func (d *doctor) add(check, node, status, found, change string) {
	d.findings = append(d.findings, finding{Check: check, Node: node, Status: status, Found: found, Change: change})
}

func cmdDoctor(ctx context.Context, e *env, args []string) error {
	fs := e.flags()
	var o doctorOptions
	fs.IntVar(&o.fleet, "fleet", 0, "replicas of the services (Breakers) that will share this Redis, checked against maxclients")
	fs.DurationVar(&o.coordTimeout, "coordinator-timeout", cbgrpc.DefaultCoordinatorTimeout, "the services' WithCoordinatorTimeout, checked against the round trip")
	fs.StringVar(&o.user, "user", "", "`NAME` of the ACL user whose grant to check with ACL DRYRUN, or ACL GETUSER on Redis 6 (default: the user cbctl connects as)")
	e.replicaFlags(fs)
	pos, err := e.parse(args)
	if err != nil {
		return err
	}
	switch {
	case len(pos) != 0:
		return usageErr("doctor takes no argument, got %q", pos)
	case o.fleet < 0:
		return usageErr("--fleet %d: want the number of the services' replicas, or 0 not to check maxclients", o.fleet)
	case o.coordTimeout <= 0:
		return usageErr("--coordinator-timeout %v: want the services' coordinator timeout, more than 0", o.coordTimeout)
	}
	if err := e.checkReplicaFlags(); err != nil {
		return err
	}
	d := &doctor{e: e, opts: o}
	if strings.ContainsAny(e.prefix, "{}") {
		// The coordinator refuses such a prefix: nothing else can be checked.
		d.add("hash-tag", "", statusFail, fmt.Sprintf("--prefix %q holds a brace, which the coordinator refuses (it adds each scope's own hash tag)", e.prefix),
			"give the services' redis.WithPrefix, and them a prefix without braces (docs/redis.md, Key layout)")
		return d.report()
	}
	if d.c, err = e.coordinator(); err != nil {
		return err
	}
	d.sentinel, _ = e.viaSentinel()
	ctx, cancel := context.WithTimeout(ctx, e.timeout)
	defer cancel()
	d.run(ctx)
	return d.report()
}

// run makes every check, in the order an operator would fix them: what
// cannot be reached hides the rest.
func (d *doctor) run(ctx context.Context) {
	if err := d.e.client.Ping(ctx).Err(); err != nil {
		d.add("connect", "", statusFail, connectError(d.c, err), "check --addr (--cluster, --sentinel), --tls and the credentials in $CBCTL_REDIS_USERNAME, $CBCTL_REDIS_PASSWORD")
		return
	}
	nodes, err := d.nodes(ctx)
	if err != nil {
		d.add("connect", "", statusFail, "listing the Cluster's masters: "+err.Error(), "check that every master of the Cluster is reachable from here")
		return
	}
	d.add("connect", "", statusOK, "PING answered by "+d.nodeList(nodes), "")
	for _, n := range nodes {
		d.checkNode(ctx, n)
	}
	d.checkReady(ctx)
	d.checkPubSub(ctx)
	d.checkHashTag(ctx)
}

// checkNode makes the checks that each master answers for itself: a
// Cluster's masters each have their own configuration, users and
// replicas.
func (d *doctor) checkNode(ctx context.Context, n *goredis.Client) {
	v := d.checkServer(ctx, n)
	d.checkReplicas(ctx, n)
	d.checkEviction(ctx, n)
	d.checkMaxclients(ctx, n)
	d.checkLatency(ctx, n)
	d.checkScripts(ctx, n)
	d.checkACL(ctx, n, v)
}

// nodes are the masters to check one by one: the one server (found
// through the Sentinels, with --sentinel), or every master of a Cluster,
// by address.
func (d *doctor) nodes(ctx context.Context) ([]*goredis.Client, error) {
	cc, ok := d.e.client.(*goredis.ClusterClient)
	if !ok {
		return []*goredis.Client{d.e.client.(*goredis.Client)}, nil
	}
	var mu sync.Mutex
	var nodes []*goredis.Client
	err := cc.ForEachMaster(ctx, func(_ context.Context, n *goredis.Client) error {
		mu.Lock()
		defer mu.Unlock()
		nodes = append(nodes, n)
		return nil
	})
	sort.Slice(nodes, func(i, j int) bool { return nodes[i].Options().Addr < nodes[j].Options().Addr })
	return nodes, err
}

// node names n in a finding: only a Cluster has more than one.
func (d *doctor) node(n *goredis.Client) string {
	if _, ok := d.e.client.(*goredis.ClusterClient); ok {
		return n.Options().Addr
	}
	return ""
}

// nodeList names the nodes doctor checks; a failover client names the
// master it found through the Sentinels by the name they know it by.
func (d *doctor) nodeList(nodes []*goredis.Client) string {
	if d.sentinel {
		return fmt.Sprintf("master %q, found through the Sentinels %s", d.e.master, d.e.sentinel)
	}
	addrs := make([]string, len(nodes))
	for i, n := range nodes {
		addrs[i] = n.Options().Addr
	}
	return strings.Join(addrs, ", ")
}

// connectError says why the first PING failed, in the coordinator's
// words for its kind.
func connectError(c *cbredis.Coordinator, err error) string {
	if kind := c.ErrorKind(err); kind != "" {
		return fmt.Sprintf("PING failed (%s): %v", kind, err)
	}
	return "PING failed: " + err.Error()
}
