package breakerstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/resiliencekit/resiliencekit/redis/breakerstore"
	"github.com/resiliencekit/resiliencekit/redis/redistest"
	"github.com/resiliencekit/resiliencekit/resilience"
)

// TestFleetOnRedisCluster: 3 replica processes share a breaker on a Redis
// Cluster of 3 masters with a replica each, which the test starts
// (redis-server --cluster-enabled, redis-cli --cluster create). The master
// holding the breaker's slot (its keys are hashed to one) is killed
// (SIGKILL) mid-run: no call waits on the failover (none over its budget),
// and every replica shares again within 1 s of the replica's promotion.
// Then on the new master, an outage opens the fleet and a recovery with
// the default options closes it within OpenTimeout and two flush
// intervals, with one probe; and while half-open, the script calls
// fleet-wide stay at one per replica per flush interval.
func TestFleetOnRedisCluster(t *testing.T) {
	skipUnlessProcesses(t)
	cl := redistest.StartCluster(t, 3, 1)
	dep := newDependency(t)
	name := fleetName(t)
	store := breakerstore.New(cl.Client(), "fleet:")
	w := watchFleet(t, store, name)
	key := "fleet:{" + name + "}:gen"
	master := cl.MasterOf(key)
	require.NotNil(t, master, "a master holds the breaker's slot")
	var rs []*replica
	for range 3 {
		r := startReplica(t, defaultReplica(cl.Addrs(), name, dep.srv.URL))
		r.send("run")
		rs = append(rs, r)
	}
	time.Sleep(500 * time.Millisecond)

	master.Kill()
	killed := time.Now()
	var promoted time.Time
	for time.Since(killed) < 10*time.Second {
		if m := cl.MasterOf(key); m != nil && m != master {
			promoted = time.Now()
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	require.False(t, promoted.IsZero(), "a replica took over the breaker's slot")
	time.Sleep(1500 * time.Millisecond) // sharing again

	dep.down.Store(true)
	outage := time.Now()
	_, ok := w.next(resilience.StateOpen, outage, 3*time.Second)
	if !ok {
		st, err := breakerstore.New(cl.Client(), "fleet:").Read(context.Background(), name, defaultReplica(nil, "", "").policy())
		t.Logf("the dependency saw %d calls", dep.reached.Load())
		for _, r := range rs {
			r.quit()
			t.Logf("a replica's events: %v", r.events)
		}
		t.Fatalf("the fleet did not open on the new master (promoted %v after the kill); the store says %+v, %v; changes heard: %v",
			promoted.Sub(killed), st, err, w.since(killed))
	}
	time.Sleep(500 * time.Millisecond)
	_, stillOpen := w.next(resilience.StateOpen, outage, 0)
	require.True(t, stillOpen)
	dep.probes.Store(0)
	dep.down.Store(false)
	healthy := time.Now()
	c, ok := w.next(resilience.StateClosed, healthy, 3*time.Second)
	require.True(t, ok, "the fleet closed")
	time.Sleep(300 * time.Millisecond)
	probes := dep.probes.Load()
	for _, r := range rs {
		r.quit()
	}

	const budget = 100 * time.Millisecond // a loaded 2-core machine has shown 55 ms of scheduling inside Execute
	t.Logf("master killed; replica promoted %v later; fleet closed %v after the dependency was healthy, %d probe(s)",
		promoted.Sub(killed).Round(time.Millisecond), c.at.Sub(healthy).Round(time.Millisecond), probes)
	for i, r := range rs {
		var back time.Time
		lost := false
		for _, e := range r.events {
			if e.at.Before(killed) {
				continue
			}
			if e.kind == resilience.EventSharedStateUnavailable.String() {
				lost = true
			}
			if e.kind == resilience.EventSharedStateRestored.String() && back.IsZero() {
				back = e.at
			}
		}
		t.Logf("replica %d: lost sharing %v, shared again %v after the promotion; slowest call %v, of which in the breaker %v", i, lost,
			back.Sub(promoted).Round(time.Millisecond), r.slowest, r.own)
		if lost {
			require.False(t, back.IsZero(), "replica %d shares again", i)
			assert.Less(t, back.Sub(promoted), time.Second, "replica %d shares again within 1 s of the failover", i)
		}
		// The dependency's own time is not the breaker's: on a loaded
		// machine an HTTP call may take longer than the budget by itself.
		assert.Less(t, r.own, budget, "replica %d: no call waits on Redis beyond its budget", i)
	}
	assert.LessOrEqual(t, c.at.Sub(healthy), fleetOpen+2*fleetFlush)
	assert.EqualValues(t, 1, probes)

	// One flush per interval per replica while half-open, on the cluster
	// after the failover too: the scripts of every live node.
	t.Run("flush rate while half-open", func(t *testing.T) {
		var live []*redis.Client
		for _, n := range cl.Nodes {
			if n != master {
				live = append(live, n.Client())
			}
		}
		flushRateWhileHalfOpen(t, cl.Addrs(), breakerstore.New(cl.Client(), "fleet:"), func() int64 {
			var n int64
			for _, c := range live {
				n += scriptCalls(t, c)
			}
			return n
		})
	})
}
