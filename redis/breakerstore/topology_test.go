package breakerstore_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/resiliencekit/resiliencekit/redis/breakerstore"
	"github.com/resiliencekit/resiliencekit/redis/redistest"
)

// topology is the Redis a fleet test's replicas share their breaker on:
// one redis-server of the test's own, or a Redis Cluster of its own (in
// TestFleetOnRedisCluster, after the failover of a master). The fleet
// tests of recovery_test.go run on either.
type topology struct {
	servers []*redistest.Server      // every node
	addrs   []string                 // the replicas' seed addresses
	client  redis.UniversalClient    // the test's own
	cluster *redistest.Cluster       // nil: one server
	home    *redistest.Server        // on a cluster, the master that holds the tests' breakers (nil: any)
	nodes   map[string]*redis.Client // a client of each server, by address
}

// serverTopology starts a redis-server of the test's own.
func serverTopology(t *testing.T) *topology {
	srv := redistest.Start(t)
	return &topology{servers: []*redistest.Server{srv}, addrs: []string{srv.Addr()}, client: srv.Client(),
		nodes: map[string]*redis.Client{srv.Addr(): srv.Client()}}
}

// clusterTopology is cl; its breakers may be held by any master until
// home is set.
func clusterTopology(cl *redistest.Cluster) *topology {
	tp := &topology{servers: cl.Nodes, addrs: cl.Addrs(), client: cl.Client(), cluster: cl, nodes: map[string]*redis.Client{}}
	for _, n := range cl.Nodes {
		tp.nodes[n.Addr()] = n.Client()
	}
	return tp
}

// store returns a Store of the test's own on the topology.
func (tp *topology) store() *breakerstore.Store { return breakerstore.New(tp.client, "fleet:") }

// name returns a breaker name of the test's own: on a cluster, one whose
// slot the home master holds, if it is set.
func (tp *topology) name(t *testing.T) string {
	name := fleetName(t)
	if tp.home == nil {
		return name
	}
	for i := range 1000 {
		n := fmt.Sprintf("%s-%d", name, i)
		if tp.cluster.MasterOf(fleetKey(n)) == tp.home {
			return n
		}
	}
	t.Fatal("no name found whose slot the home master holds")
	return ""
}

// fleetKey is a key of the breaker called name: the fleet tests' keys
// are all in its slot.
func fleetKey(name string) string { return "fleet:{" + name + "}:gen" }

// live returns a client of each live server.
func (tp *topology) live() []*redis.Client {
	var cs []*redis.Client
	for _, s := range tp.servers {
		if s.Live() {
			cs = append(cs, tp.nodes[s.Addr()])
		}
	}
	return cs
}

// scriptCount is how many scripts a server had run, and when it said so.
type scriptCount struct {
	n  int64
	at time.Time
}

// scripts returns how many scripts each live server has run.
func (tp *topology) scripts(t *testing.T) []scriptCount {
	var sc []scriptCount
	for _, c := range tp.live() {
		start := time.Now()
		n := scriptCalls(t, c)
		sc = append(sc, scriptCount{n, start.Add(time.Since(start) / 2)})
	}
	return sc
}

// subscribers returns how many clients have subscribed to the channel of
// the changes of the breaker called name, on every live server (a
// cluster's nodes each hold their own subscriptions, and pass what is
// published on to each other).
func (tp *topology) subscribers(name string) int64 {
	ch := "fleet:{" + name + "}:changes"
	var n int64
	for _, c := range tp.live() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		m, err := c.PubSubNumSub(ctx, ch).Result()
		cancel()
		if err != nil {
			return -1
		}
		n += m[ch]
	}
	return n
}

// sharing returns how many replicas have had a batch of counts of the
// breaker called name applied by the store (in the window): the replicas
// that have reached it, and so heard the fleet's generation.
func (tp *topology) sharing(name string) int {
	ids := map[string]bool{}
	for _, c := range tp.live() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		keys, _ := c.Keys(ctx, "fleet:{"+name+"}:seq:*").Result()
		cancel()
		for _, k := range keys {
			ids[k[strings.LastIndex(k, ":")+1:]] = true // seq:replica, the last batch applied
		}
	}
	return len(ids)
}

// gone takes away the servers holding the keys of the breaker called name,
// how: "killed" (SIGKILL) or "frozen" (SIGSTOP). On a cluster, these are
// the master of the slot and its replicas, if any: the other nodes go on
// answering (CLUSTERDOWN), and no failover brings the slot back. It
// returns what brings a frozen topology back (and, on a cluster, waits
// until it is ok again); a killed one does not come back.
func (tp *topology) gone(t *testing.T, name, how string) (back func()) {
	held := tp.servers
	if tp.cluster != nil {
		held = tp.cluster.ShardOf(fleetKey(name))
		require.NotEmpty(t, held, "a master holds the breaker's slot")
	}
	for _, s := range held {
		if how == "killed" {
			s.Kill()
		} else {
			s.Freeze()
		}
	}
	return func() {
		if how == "killed" {
			return
		}
		for _, s := range held {
			s.Thaw()
		}
		if tp.cluster != nil {
			tp.cluster.WaitOK(t, 10*time.Second)
		}
	}
}

// goneWays are the ways gone takes Redis away, killed last: a cluster
// whose slot's master was killed is not ok again.
var goneWays = []string{"frozen", "killed"}

// links is a fault proxy in front of each of a topology's servers, for the
// connections of one replica (replicaConfig.Via): the test cuts or slows
// all its links at once.
type links struct {
	via     map[string]string // server address -> proxy address
	proxies []*redistest.Proxy
}

func (tp *topology) links(t *testing.T) *links {
	l := &links{via: map[string]string{}}
	for _, s := range tp.servers {
		p := redistest.NewProxy(t, s.Addr())
		l.via[s.Addr()] = p.Addr()
		l.proxies = append(l.proxies, p)
	}
	return l
}

// Cut cuts every link (see redistest.Proxy.Cut).
func (l *links) Cut() {
	for _, p := range l.proxies {
		p.Cut()
	}
}

// Heal heals every link (see redistest.Proxy.Heal).
func (l *links) Heal() {
	for _, p := range l.proxies {
		p.Heal()
	}
}

// Delay delays every link by d each way (see redistest.Proxy.Delay).
func (l *links) Delay(d time.Duration) {
	for _, p := range l.proxies {
		p.Delay(d)
	}
}
