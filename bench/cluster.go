package bench

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/cbgrpc/cbgrpc/internal/freeport"
)

// Cluster is a private Redis Cluster of three masters and no replicas on
// free loopback ports, made with redis-cli --cluster create.
type Cluster struct {
	Nodes []*Redis
}

// StartCluster starts three cluster-enabled servers, assigns every slot and
// returns once each node reports cluster_state:ok and knows the others.
func StartCluster() (*Cluster, error) {
	c := &Cluster{}
	for range 3 {
		port, err := freeport.Loopback(true)
		if err != nil {
			c.Stop()
			return nil, err
		}
		n, err := startRedis(port, "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
			"--cluster-node-timeout", "5000")
		if err != nil {
			c.Stop()
			return nil, err
		}
		c.Nodes = append(c.Nodes, n)
	}
	args := append([]string{"--cluster", "create"}, c.Target().Addrs...)
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	if out, err := exec.Command("redis-cli", args...).CombinedOutput(); err != nil {
		c.Stop()
		return nil, fmt.Errorf("redis-cli %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	for _, n := range c.Nodes {
		if err := awaitClusterOK(n.Addr, len(c.Nodes)); err != nil {
			c.Stop()
			return nil, err
		}
	}
	return c, nil
}

// awaitClusterOK polls CLUSTER INFO on addr until the node is ok and knows
// nodes nodes.
func awaitClusterOK(addr string, nodes int) error {
	c := goredis.NewClient(&goredis.Options{Addr: addr})
	defer c.Close()
	want := []string{"cluster_state:ok", fmt.Sprintf("cluster_known_nodes:%d", nodes)}
	var info string
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		var err error
		if info, err = c.ClusterInfo(context.Background()).Result(); err != nil {
			continue
		}
		if strings.Contains(info, want[0]) && strings.Contains(info, want[1]) {
			return nil
		}
	}
	return fmt.Errorf("cluster node %s is not ok with %d nodes after 30s:\n%s", addr, nodes, info)
}

// Stop ends every node.
func (c *Cluster) Stop() {
	for _, n := range c.Nodes {
		n.Stop()
	}
}

// Target is the cluster, for a simulated fleet.
func (c *Cluster) Target() Target {
	t := Target{Cluster: true}
	for _, n := range c.Nodes {
		t.Addrs = append(t.Addrs, n.Addr)
	}
	return t
}
