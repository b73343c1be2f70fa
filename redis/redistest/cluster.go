package redistest

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Cluster is a Redis Cluster of the test's own: redis-server processes
// started with --cluster-enabled and joined by redis-cli --cluster create,
// stopped when the test ends.
type Cluster struct {
	t     testing.TB
	Nodes []*Server
}

// StartCluster starts a cluster of masters masters, each with replicas
// replicas, on 127.0.0.1 (a node timeout of 500 ms, so that a failover
// takes about a second), and waits until it serves every slot. It skips
// the test if there is no redis-server or redis-cli on the PATH.
func StartCluster(t testing.TB, masters, replicas int) *Cluster {
	t.Helper()
	if _, err := exec.LookPath("redis-cli"); err != nil {
		t.Skip("no redis-cli on the PATH (.ci/run installs one with redis-server)")
	}
	c := &Cluster{t: t}
	for range masters * (1 + replicas) {
		c.Nodes = append(c.Nodes, Start(t, "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
			"--cluster-node-timeout", "500", "--appendonly", "no"))
	}
	args := []string{"--cluster", "create"}
	args = append(args, c.Addrs()...)
	args = append(args, "--cluster-replicas", fmt.Sprint(replicas), "--cluster-yes")
	if out, err := exec.Command("redis-cli", args...).CombinedOutput(); err != nil {
		t.Fatalf("redis-cli --cluster create: %v\n%s", err, out)
	}
	deadline := time.Now().Add(20 * time.Second)
	for _, n := range c.Nodes {
		for !c.ok(n) {
			if time.Now().After(deadline) {
				t.Fatalf("the cluster is not ok at %s", n.Addr())
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return c
}

// ok reports whether n says the cluster is ok, every node in place: a
// replica, until it has synced, is not listed and cannot take over.
func (c *Cluster) ok(n *Server) bool {
	cl := redis.NewClient(&redis.Options{Addr: n.Addr(), ContextTimeoutEnabled: true, MaxRetries: -1})
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	info, err := cl.ClusterInfo(ctx).Result()
	if err != nil || !strings.Contains(info, "cluster_state:ok") {
		return false
	}
	slots, err := cl.ClusterSlots(ctx).Result()
	if err != nil {
		return false
	}
	listed := 0
	for _, s := range slots {
		listed += len(s.Nodes)
	}
	return listed == len(c.Nodes)
}

// Addrs returns the nodes' host:port.
func (c *Cluster) Addrs() []string {
	var a []string
	for _, n := range c.Nodes {
		a = append(a, n.Addr())
	}
	return a
}

// Client returns a cluster client of every node, with
// ContextTimeoutEnabled, closed when the test ends.
func (c *Cluster) Client() *redis.ClusterClient {
	cl := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs(), ContextTimeoutEnabled: true})
	c.t.Cleanup(func() { _ = cl.Close() })
	return cl
}

// MasterOf returns the node serving key's slot as its master, as the
// live nodes see it, or nil if none does.
func (c *Cluster) MasterOf(key string) *Server {
	for _, n := range c.Nodes {
		if n.cmd == nil {
			continue // killed
		}
		cl := redis.NewClient(&redis.Options{Addr: n.Addr(), ContextTimeoutEnabled: true, MaxRetries: -1})
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		slot, err1 := cl.ClusterKeySlot(ctx, key).Result()
		slots, err2 := cl.ClusterSlots(ctx).Result()
		cancel()
		cl.Close()
		if err1 != nil || err2 != nil {
			continue
		}
		for _, s := range slots {
			if int64(s.Start) <= slot && slot <= int64(s.End) && len(s.Nodes) > 0 {
				for _, m := range c.Nodes {
					if m.Addr() == s.Nodes[0].Addr && m.cmd != nil {
						return m
					}
				}
			}
		}
	}
	return nil
}
