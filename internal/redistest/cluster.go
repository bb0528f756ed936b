package redistest

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// manualFailoverTimeout is how long Redis gives a CLUSTER FAILOVER before
// abandoning it (CLUSTER_MF_TIMEOUT), plus a margin.
const manualFailoverTimeout = 6 * time.Second

// Cluster is a Redis Cluster of three masters, with or without a replica
// each. Nodes keep their order; which of them is a master changes with
// every failover, so ask [Cluster.MasterOf] and [Cluster.ReplicaOf].
type Cluster struct {
	Nodes []*Server
}

// StartCluster starts three cluster-enabled servers, assigns every slot
// with redis-cli --cluster create and waits until each node reports
// cluster_state:ok.
func StartCluster(t testing.TB) *Cluster {
	t.Helper()
	return startCluster(t, 0)
}

// StartClusterWithReplicas starts three masters with one replica each,
// and waits until every node reports cluster_state:ok and knows the five
// others, and every replica is in sync with its master.
func StartClusterWithReplicas(t testing.TB) *Cluster {
	t.Helper()
	return startCluster(t, 1)
}

func startCluster(t testing.TB, replicas int) *Cluster {
	t.Helper()
	cli := binary(t, "redis-cli")
	c := &Cluster{}
	for range 3 * (1 + replicas) {
		c.Nodes = append(c.Nodes, start(t, clusterNode))
	}
	args := append([]string{"--cluster", "create"}, c.Addrs()...)
	args = append(args, "--cluster-replicas", strconv.Itoa(replicas), "--cluster-yes")
	out, err := exec.Command(cli, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("redistest: redis-cli %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	known := fmt.Sprintf("cluster_known_nodes:%d", len(c.Nodes))
	waitFor(t, waitTimeout, "cluster to be ok and in sync", func(ctx context.Context) error {
		for _, n := range c.Nodes {
			if err := n.clusterOK(ctx, known); err != nil {
				return err
			}
			if _, err := n.upstream(ctx); err != nil {
				return err
			}
			// Gossip tells the others of a replica a little later.
			view, err := n.clusterView(ctx)
			if err != nil {
				return err
			}
			if got := view.replicas(); got != 3*replicas {
				return fmt.Errorf("%s sees %d replicas, want %d", n.Addr(), got, 3*replicas)
			}
		}
		return nil
	})
	return c
}

// Addrs are the nodes' addresses.
func (c *Cluster) Addrs() []string {
	addrs := make([]string, len(c.Nodes))
	for i, n := range c.Nodes {
		addrs[i] = n.Addr()
	}
	return addrs
}

// Client returns a cluster client, closed by t.Cleanup.
func (c *Cluster) Client(t testing.TB) *goredis.ClusterClient {
	t.Helper()
	cc := goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: c.Addrs()})
	t.Cleanup(func() { cc.Close() })
	return cc
}

// MasterOf returns the master that serves key's slot, as the first node
// that answers sees it.
func (c *Cluster) MasterOf(t testing.TB, key string) *Server {
	t.Helper()
	_, master, _ := c.shardOf(t, key)
	return master
}

// ReplicaOf returns the replica of the master that serves key's slot, or
// nil in a cluster without replicas.
func (c *Cluster) ReplicaOf(t testing.TB, key string) *Server {
	t.Helper()
	_, _, replica := c.shardOf(t, key)
	return replica
}

// FailoverSlotOf runs CLUSTER FAILOVER on the replica of the master that
// serves key's slot, and returns once every node reports cluster_state:ok
// and sees the replica serve the slot and the old master replicate it,
// and the old master's link is up. A manual failover loses no acknowledged
// write: the master pauses its clients until the replica has caught up.
// Every node must be running.
//
// Masters refuse to vote for a second failover of one shard within twice
// the node timeout (10 s): FailoverSlotOf asks again until that passes.
func (c *Cluster) FailoverSlotOf(t testing.TB, key string) {
	t.Helper()
	slot, old, next := c.shardOf(t, key)
	if next == nil {
		t.Fatalf("redistest: FailoverSlotOf %q: master %s has no replica", key, old.Addr())
	}
	var asked time.Time
	what := fmt.Sprintf("%s to take slot %d from %s", next.Addr(), slot, old.Addr())
	waitFor(t, waitTimeout, what, func(ctx context.Context) error {
		if time.Since(asked) > manualFailoverTimeout {
			if err := next.rdb.ClusterFailover(ctx).Err(); err != nil {
				return fmt.Errorf("%s: CLUSTER FAILOVER: %w", next.Addr(), err)
			}
			asked = time.Now()
		}
		for _, n := range c.Nodes {
			view, err := n.clusterView(ctx)
			if err != nil {
				return err
			}
			if m, r := view.shard(slot); m != next.Addr() || r != old.Addr() {
				return fmt.Errorf("%s sees slot %d served by %s, replicated by %q", n.Addr(), slot, m, r)
			}
			if err := n.clusterOK(ctx); err != nil {
				return err
			}
		}
		up, err := old.upstream(ctx)
		if err == nil && up != next.Addr() {
			err = fmt.Errorf("old master %s replicates %q", old.Addr(), up)
		}
		return err
	})
}

// clusterOK returns nil when s reports cluster_state:ok and every line of
// CLUSTER INFO in want.
func (s *Server) clusterOK(ctx context.Context, want ...string) error {
	info, err := s.rdb.ClusterInfo(ctx).Result()
	if err != nil {
		return fmt.Errorf("%s: CLUSTER INFO: %w", s.Addr(), err)
	}
	for _, line := range append(want, "cluster_state:ok") {
		if !strings.Contains(info, line) {
			return fmt.Errorf("%s: CLUSTER INFO has no %s:\n%s", s.Addr(), line, info)
		}
	}
	return nil
}

// shardOf returns key's slot, the master that serves it and its replica
// (nil if it has none), as the first node that answers sees them: a paused
// node is passed over.
func (c *Cluster) shardOf(t testing.TB, key string) (slot int, master, replica *Server) {
	t.Helper()
	var errs []error
	for _, n := range c.Nodes {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		s, err := n.rdb.ClusterKeySlot(ctx, key).Result()
		var view clusterView
		if err == nil {
			view, err = n.clusterView(ctx)
		}
		cancel()
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", n.Addr(), err))
			continue
		}
		slot = int(s)
		m, r := view.shard(slot)
		if master = c.node(m); master == nil {
			t.Fatalf("redistest: %s sees no master for slot %d", n.Addr(), slot)
		}
		return slot, master, c.node(r)
	}
	t.Fatalf("redistest: key %q: no node answered: %v", key, errors.Join(errs...))
	return 0, nil, nil
}

// node returns the node listening on addr, nil if none.
func (c *Cluster) node(addr string) *Server {
	for _, n := range c.Nodes {
		if n.Addr() == addr {
			return n
		}
	}
	return nil
}

// clusterView is one node's CLUSTER NODES.
type clusterView []viewedNode

// viewedNode is one line of CLUSTER NODES.
type viewedNode struct {
	id, addr string
	master   bool
	// of is the id of the master a replica replicates.
	of    string
	slots [][2]int
}

// clusterView parses what s answers to CLUSTER NODES: id, ip:port@bus,
// flags, master id, ping, pong, epoch, link state, slots.
func (s *Server) clusterView(ctx context.Context) (clusterView, error) {
	out, err := s.rdb.ClusterNodes(ctx).Result()
	if err != nil {
		return nil, fmt.Errorf("%s: CLUSTER NODES: %w", s.Addr(), err)
	}
	var view clusterView
	for line := range strings.Lines(strings.TrimSpace(out)) {
		f := strings.Fields(line)
		if len(f) < 8 {
			return nil, fmt.Errorf("%s: CLUSTER NODES line %q", s.Addr(), line)
		}
		addr, _, _ := strings.Cut(f[1], "@")
		n := viewedNode{id: f[0], addr: addr, of: f[3]}
		for flag := range strings.SplitSeq(f[2], ",") {
			n.master = n.master || flag == "master"
		}
		for _, r := range f[8:] {
			// [slot->-id] and [slot-<-id] are slots being migrated.
			if strings.HasPrefix(r, "[") {
				continue
			}
			from, to, ok := strings.Cut(r, "-")
			if !ok {
				to = from
			}
			lo, err1 := strconv.Atoi(from)
			hi, err2 := strconv.Atoi(to)
			if err1 != nil || err2 != nil {
				return nil, fmt.Errorf("%s: CLUSTER NODES slots %q", s.Addr(), r)
			}
			n.slots = append(n.slots, [2]int{lo, hi})
		}
		view = append(view, n)
	}
	return view, nil
}

// shard returns the addresses of the master serving slot and of its first
// replica, "" for none.
func (v clusterView) shard(slot int) (master, replica string) {
	for _, m := range v {
		if !m.master || !m.serves(slot) {
			continue
		}
		for _, r := range v {
			if r.of == m.id {
				return m.addr, r.addr
			}
		}
		return m.addr, ""
	}
	return "", ""
}

func (v clusterView) replicas() int {
	n := 0
	for _, r := range v {
		if !r.master {
			n++
		}
	}
	return n
}

func (n viewedNode) serves(slot int) bool {
	for _, r := range n.slots {
		if r[0] <= slot && slot <= r[1] {
			return true
		}
	}
	return false
}
