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
			"--cluster-node-timeout", "500", "--appendonly", "no",
			// A replica syncs at once, not 5 s later, and is listed in
			// CLUSTER SLOTS once its replication offset is not 0: the master
			// moves it on with a ping every second, not every 10 s.
			"--repl-diskless-sync-delay", "0", "--repl-ping-replica-period", "1"))
	}
	args := []string{"--cluster", "create"}
	args = append(args, c.Addrs()...)
	args = append(args, "--cluster-replicas", fmt.Sprint(replicas), "--cluster-yes")
	if out, err := exec.Command("redis-cli", args...).CombinedOutput(); err != nil {
		t.Fatalf("redis-cli --cluster create: %v\n%s", err, out)
	}
	c.WaitOK(t, 20*time.Second)
	return c
}

// WaitOK waits up to d until every live node says the cluster is ok, every
// live node in place (after a failover, or a node's freeze and thaw), and
// fails t if it is not.
func (c *Cluster) WaitOK(t testing.TB, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	for _, n := range c.Nodes {
		for n.Live() && !c.ok(n) {
			if time.Now().After(deadline) {
				t.Fatalf("the cluster is not ok at %s", n.Addr())
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
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
	listed, live := 0, 0
	for _, s := range slots {
		listed += len(s.Nodes)
	}
	for _, n := range c.Nodes {
		if n.Live() {
			live++
		}
	}
	return listed == live
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
	if shard := c.ShardOf(key); len(shard) > 0 {
		return shard[0]
	}
	return nil
}

// ShardOf returns the live nodes serving key's slot, its master first, then
// its replicas, as the first live node that answers sees them; nil if
// none does.
func (c *Cluster) ShardOf(key string) []*Server {
	for _, n := range c.Nodes {
		if !n.Live() {
			continue
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
			if int64(s.Start) > slot || slot > int64(s.End) || len(s.Nodes) == 0 {
				continue
			}
			var shard []*Server
			for _, sn := range s.Nodes {
				for _, m := range c.Nodes {
					if m.Addr() == sn.Addr && m.Live() {
						shard = append(shard, m)
					}
				}
			}
			if len(shard) > 0 && shard[0].Addr() == s.Nodes[0].Addr {
				return shard
			}
		}
	}
	return nil
}
