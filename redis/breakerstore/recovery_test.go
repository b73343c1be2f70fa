package breakerstore_test

import (
	"context"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/resiliencekit/resiliencekit/resilience"
)

// The fleet's timings in these tests: OpenTimeout 1 s, FlushInterval 100
// ms, so the bound of a recovery is 1.2 s.
const (
	fleetOpen  = time.Second
	fleetFlush = 100 * time.Millisecond
	binSlack   = 2 * binWidth          // a bin's width, each end
	closeSlack = 50 * time.Millisecond // a replica's scheduling, beyond Close's 2 flush intervals
)

// defaultReplica is a replica with the default options, and a failure
// rate of 50% over a window of 1 s (at least 3 calls): with
// ConsecutiveFailures(5), each replica's own breaker opens after 5
// failures, so the fleet opens on the failures of the replicas' probes
// once the window has forgotten the healthy calls.
func defaultReplica(addrs []string, name, dep string) replicaConfig {
	return replicaConfig{Addrs: addrs, Name: name, Dependency: dep, Consecutive: -1, Rate: 0.5, Min: 3, WindowMS: 1000,
		OpenMS: int(fleetOpen / time.Millisecond), FlushMS: int(fleetFlush / time.Millisecond), PauseUS: 2000}
}

// rounds is how many outages TestFleetRecoversWithDefaultOptions goes
// through: RESILIENCEKIT_FLEET_ROUNDS, or 2.
func rounds() int {
	if n, err := strconv.Atoi(os.Getenv("RESILIENCEKIT_FLEET_ROUNDS")); err == nil && n > 0 {
		return n
	}
	return 2
}

// startFleet sets up a fleet test on tp: a dependency, a breaker name of
// the test's own, a watcher of the fleet's changes, and 3 replica
// processes of defaultReplica (each changed by tune, if not nil, by its
// index) calling the dependency in a loop.
func startFleet(t *testing.T, tp *topology, tune func(i int, cfg *replicaConfig)) (*dependency, string, *watcher, []*replica) {
	dep, name := newDependency(t), tp.name(t)
	w := watchFleet(t, tp.store(), name)
	var rs []*replica
	for i := range 3 {
		cfg := defaultReplica(tp.addrs, name, dep.srv.URL)
		if tune != nil {
			tune(i, &cfg)
		}
		r := startReplica(t, cfg)
		r.send("run")
		rs = append(rs, r)
	}
	return dep, name, w, rs
}

// TestFleetRecoversWithDefaultOptions: 3 replica processes with the
// default options (ConsecutiveFailures(5) beside the failure rate), an
// outage of 3 s that opens the fleet (and every replica's own breaker),
// then a healthy dependency: the fleet closes, with exactly
// HalfOpenRequests probes, and every replica serves, within OpenTimeout
// and two flush intervals. Repeated (RESILIENCEKIT_FLEET_ROUNDS, 2 by
// default; 10 for the figures of docs/shared-breaker.md).
func TestFleetRecoversWithDefaultOptions(t *testing.T) {
	skipUnlessProcesses(t)
	fleetRecovers(t, serverTopology(t))
}

// fleetRecovers runs TestFleetRecoversWithDefaultOptions on tp.
func fleetRecovers(t *testing.T, tp *topology) {
	dep, _, w, rs := startFleet(t, tp, nil)
	time.Sleep(300 * time.Millisecond)
	type round struct {
		healthy, halfOpen, closed time.Time
		probes                    int64
	}
	var done []round
	for i := range rounds() {
		dep.down.Store(true)
		outage := time.Now()
		time.Sleep(3 * time.Second)
		_, opened := w.next(resilience.StateOpen, outage, 0)
		require.True(t, opened, "round %d: the outage opened the fleet", i)
		dep.probes.Store(0)
		dep.down.Store(false)
		healthy := time.Now()
		c, ok := w.next(resilience.StateClosed, healthy, 3*time.Second)
		require.True(t, ok, "round %d: the fleet closed", i)
		// The opening that the recovery closed: the fleet was half-open
		// OpenTimeout after it (as heard, a one-way trip after the store).
		o, _ := w.last(resilience.StateOpen, c.at)
		time.Sleep(300 * time.Millisecond) // serving
		done = append(done, round{healthy, o.at.Add(fleetOpen), c.at, dep.probes.Load()})
	}
	for _, r := range rs {
		r.quit()
	}
	for i, rd := range done {
		var serving []time.Duration
		for _, r := range rs {
			d, ok := r.first(0, rd.healthy)
			require.True(t, ok, "round %d: a replica never served", i)
			serving = append(serving, d)
		}
		t.Logf("round %d: fleet closed %v after the dependency was healthy (half-open %v after it, closed %v after that), replicas serving after %v, %d probes",
			i, rd.closed.Sub(rd.healthy).Round(time.Millisecond), rd.halfOpen.Sub(rd.healthy).Round(time.Millisecond),
			rd.closed.Sub(rd.halfOpen).Round(time.Millisecond), serving, rd.probes)
		assert.LessOrEqual(t, rd.closed.Sub(rd.healthy), fleetOpen+2*fleetFlush, "round %d: closed in time", i)
		for _, d := range serving {
			assert.LessOrEqual(t, d, fleetOpen+2*fleetFlush+binSlack, "round %d: serving in time", i)
		}
		assert.EqualValues(t, 1, rd.probes, "round %d: HalfOpenRequests probes", i)
	}
}

// TestFleetRedisGoneWhileOpen: the fleet opens, then Redis is killed
// (SIGKILL) or frozen (SIGSTOP) as the dependency recovers: every replica
// has its first success within OpenTimeout and two flush intervals, Redis
// still down; and Close takes at most two flush intervals.
func TestFleetRedisGoneWhileOpen(t *testing.T) {
	skipUnlessProcesses(t)
	for _, how := range goneWays {
		t.Run(how, func(t *testing.T) { fleetRedisGone(t, serverTopology(t), how) })
	}
}

// fleetRedisGone runs TestFleetRedisGoneWhileOpen on tp, Redis gone how.
func fleetRedisGone(t *testing.T, tp *topology, how string) {
	dep, name, w, rs := startFleet(t, tp, nil)
	time.Sleep(200 * time.Millisecond)
	dep.down.Store(true)
	start := time.Now()
	_, ok := w.next(resilience.StateOpen, start, 3*time.Second)
	require.True(t, ok, "the fleet opened")
	went := time.Now()
	back := tp.gone(t, name, how)
	dep.down.Store(false)
	healthy := time.Now()
	time.Sleep(fleetOpen + 5*fleetFlush)
	for i, r := range rs {
		r.quit()
		d, ok := r.first(0, healthy)
		require.True(t, ok, "replica %d never served", i)
		lost, restored := r.sharing(went)
		t.Logf("replica %d: first success %v after Redis went and the dependency recovered; Close took %v", i, d, r.close)
		// Gone until the replica served: a cluster may promote a replica
		// of the master killed within the wait, on a loaded machine.
		assert.True(t, lost && (restored.IsZero() || restored.After(healthy.Add(d))), "replica %d: Redis was gone until it served (back %v)", i, restored)
		assert.LessOrEqual(t, d, fleetOpen+2*fleetFlush+binSlack)
		if r.lag > closeSlack {
			t.Logf("replica %d fell behind its clock by %v during Close: its time says nothing", i, r.lag)
		} else {
			assert.LessOrEqual(t, r.close, 2*fleetFlush+closeSlack, "Close is bounded")
		}
	}
	back()
}

// TestFleetCutOffReplicaDoesNotReopen: a replica cut off from Redis
// (every byte dropped) during an outage, and back after the fleet
// recovered, does not reopen it with its old counts; no healthy replica
// rejects a call after the recovery; and the fleet's totals are exactly
// the calls made in its generation.
func TestFleetCutOffReplicaDoesNotReopen(t *testing.T) {
	skipUnlessProcesses(t)
	fleetCutOff(t, serverTopology(t), false)
}

// TestFleetReplicaCutOffFromItsStartDoesNotReopen: as
// TestFleetCutOffReplicaDoesNotReopen, for a replica cut off from Redis
// before it ever reached it, which knows no generation: the failures it
// piled up through the outage began before the fleet's last change of
// state, and neither the store nor the replica counts them in the
// recovered fleet.
func TestFleetReplicaCutOffFromItsStartDoesNotReopen(t *testing.T) {
	skipUnlessProcesses(t)
	fleetCutOff(t, serverTopology(t), true)
}

// fleetCutOff runs TestFleetCutOffReplicaDoesNotReopen on tp, the
// replica cut off from its start if fromStart.
func fleetCutOff(t *testing.T, tp *topology, fromStart bool) {
	link := tp.links(t)
	cutAt := time.Now()
	if fromStart {
		link.Cut()
	}
	dep, name, w, rs := startFleet(t, tp, func(i int, cfg *replicaConfig) {
		if i == 2 {
			cfg.Via = link.via
		}
		cfg.Consecutive = 0 // the failure rate alone: the cut-off replica piles up failures
		cfg.Min, cfg.WindowMS = 20, 10000
	})
	store := tp.store()
	cut := rs[2]
	// Every replica has reached the store, and heard the fleet's
	// generation: the counts of one that never had are the current
	// generation's, wherever it is when they arrive.
	if fromStart {
		require.Eventually(t, func() bool { return tp.sharing(name) == 2 }, 10*time.Second, 10*time.Millisecond, "the others share")
	} else {
		require.Eventually(t, func() bool { return tp.sharing(name) == 3 }, 10*time.Second, 10*time.Millisecond, "every replica shares")
		time.Sleep(300 * time.Millisecond)
		link.Cut()
		cutAt = time.Now()
	}
	dep.down.Store(true)
	outage := time.Now()
	_, ok := w.next(resilience.StateOpen, outage, 3*time.Second)
	require.True(t, ok, "the fleet opened")
	time.Sleep(time.Second) // the cut-off replica piles up failures
	dep.down.Store(false)
	healthy := time.Now()
	c, ok := w.next(resilience.StateClosed, healthy, 3*time.Second)
	require.True(t, ok, "the fleet closed")
	link.Heal() // at once: the fleet's counts in its new generation are few

	healed := time.Now()
	time.Sleep(time.Second) // the cut-off replica's flushes get through
	reopened := w.since(c.at.Add(time.Millisecond))

	// Exact totals in the fleet's generation: the replicas stop, their
	// counts are flushed, then they make 500 calls each and close.
	for _, r := range rs {
		r.send("stop")
		r.await("STOPPED")
	}
	time.Sleep(3 * fleetFlush)
	pol := replicaConfig{WindowMS: 10000, OpenMS: int(fleetOpen / time.Millisecond)}.policy()
	before, err := store.Read(context.Background(), name, pol)
	require.NoError(t, err)
	for _, r := range rs {
		r.send("calls 500")
	}
	for _, r := range rs {
		r.await("DONE")
	}
	for _, r := range rs {
		r.quit()
	}
	after, err := store.Read(context.Background(), name, pol)
	require.NoError(t, err)
	var rejected []int
	for _, r := range rs[:2] {
		rejected = append(rejected, r.count(2, c.at.Add(50*time.Millisecond), time.Now()))
	}
	t.Logf("fleet closed %v after the dependency was healthy; link healed %v after; changes of state since: %v; rejections by the healthy replicas since: %v; the cut-off replica's first success after the recovery: %v; totals %+v then %+v",
		c.at.Sub(healthy).Round(time.Millisecond), healed.Sub(c.at).Round(time.Millisecond), reopened, rejected, firstOf(cut, healthy), before, after)
	lost, back := cut.sharing(cutAt)
	assert.True(t, lost || fromStart, "the replica was cut off from Redis at %s:%s", cutAt.Format("15:04:05.000"), cut.sharingEvents())
	assert.True(t, back.After(healed), "the replica shared again once its link was back")
	assert.Empty(t, reopened, "the fleet did not reopen")
	assert.Equal(t, []int{0, 0}, rejected)
	assert.Equal(t, resilience.StateClosed, after.State)
	assert.Equal(t, before.Generation, after.Generation)
	assert.Zero(t, before.Failures, "no count of the outage's generation in the new one: the dependency has been healthy since")
	assert.EqualValues(t, 1500, after.Requests-before.Requests, "each call once, in the fleet's generation")
	assert.EqualValues(t, 0, after.Failures-before.Failures)
}

func firstOf(r *replica, from time.Time) string {
	d, ok := r.first(0, from)
	if !ok {
		return "never"
	}
	return d.String()
}

// scriptCalls returns how many scripts the server has run.
func scriptCalls(t *testing.T, c *redis.Client) int64 {
	info, err := c.Info(context.Background(), "commandstats").Result()
	require.NoError(t, err)
	var n int64
	for _, l := range strings.Split(info, "\n") {
		for _, cmd := range []string{"cmdstat_evalsha:", "cmdstat_eval:"} {
			if rest, ok := strings.CutPrefix(strings.TrimSpace(l), cmd); ok {
				calls, _, _ := strings.Cut(strings.TrimPrefix(rest, "calls="), ",")
				v, _ := strconv.ParseInt(calls, 10, 64)
				n += v
			}
		}
	}
	return n
}

// TestFleetFlushRateWhileHalfOpen: while the fleet is half-open and its
// probe hangs in one replica, the others' rejected calls make no extra
// flush: the script calls fleet-wide are at most replicas / flush
// interval, plus 10%.
func TestFleetFlushRateWhileHalfOpen(t *testing.T) {
	skipUnlessProcesses(t)
	fleetFlushRate(t, serverTopology(t))
}

// fleetFlushRate runs TestFleetFlushRateWhileHalfOpen on tp: the scripts
// of all its live servers.
func fleetFlushRate(t *testing.T, tp *topology) {
	dep, _, w, rs := startFleet(t, tp, func(_ int, cfg *replicaConfig) { cfg.PauseUS = 200 }) // busy
	time.Sleep(200 * time.Millisecond)
	dep.down.Store(true)
	start := time.Now()
	_, ok := w.next(resilience.StateOpen, start, 3*time.Second)
	require.True(t, ok, "the fleet opened")
	dep.hung.Store(true) // the probe hangs
	dep.down.Store(false)
	time.Sleep(fleetOpen + 5*fleetFlush) // half-open, the probe running
	// Each server's count over its own window: reading several nodes one
	// after the other takes time on a loaded machine. Two seconds: in one,
	// the ticks of 3 replicas alone make 30 to 33 flushes, by their phase.
	before := tp.scripts(t)
	time.Sleep(2 * time.Second)
	after := tp.scripts(t)
	var calls int
	var perSecond float64
	for i := range after {
		calls += int(after[i].n - before[i].n)
		perSecond += float64(after[i].n-before[i].n) / after[i].at.Sub(before[i].at).Seconds()
	}
	from, took := before[0].at, after[len(after)-1].at.Sub(before[0].at)
	probes := dep.probes.Load()
	dep.unhang()
	for _, r := range rs {
		r.quit()
	}
	var rejected int
	for _, r := range rs {
		rejected += r.count(2, from, from.Add(took))
	}
	t.Logf("half-open with its probe hung: %.1f script calls/s fleet-wide (nominal %.0f), %d calls rejected meanwhile, %d probe(s)",
		perSecond, 3/fleetFlush.Seconds(), rejected, probes)
	assert.LessOrEqual(t, perSecond, 1.1*3/fleetFlush.Seconds())
	assert.Greater(t, rejected, 10*calls, "calls were rejected meanwhile, far more than the flushes")
	assert.EqualValues(t, 1, probes)
}

// TestFleetSlowLinkLearnsTheOpening: one replica's link to Redis delays
// every byte 200 ms each way, more than its flush interval (100 ms) for a
// round trip: it learns that the fleet opened (on the others' failures)
// from the published change, and rejects within two flush intervals and
// its link's delay.
func TestFleetSlowLinkLearnsTheOpening(t *testing.T) {
	skipUnlessProcesses(t)
	fleetSlowLink(t, serverTopology(t))
}

// fleetSlowLink runs TestFleetSlowLinkLearnsTheOpening on tp.
func fleetSlowLink(t *testing.T, tp *topology) {
	const delay = 200 * time.Millisecond
	link := tp.links(t)
	link.Delay(delay)
	dep, name, w, rs := startFleet(t, tp, func(i int, cfg *replicaConfig) {
		cfg.OpenMS, cfg.Consecutive = 10000, 0
		if i == 2 {
			cfg.Via = link.via
			cfg.Dependency += "/always" // its own calls succeed: only the fleet can stop them
		}
	})
	slow := rs[2]
	// Every replica subscribed, the slow one through its link, and the test.
	require.Eventually(t, func() bool { return tp.subscribers(name) == 4 }, 10*time.Second, 10*time.Millisecond, "subscribed")
	dep.down.Store(true)
	start := time.Now()
	c, ok := w.next(resilience.StateOpen, start, 3*time.Second)
	require.True(t, ok, "the fleet opened")
	time.Sleep(time.Second)
	for _, r := range rs {
		r.quit()
	}
	d, ok := slow.first(2, c.at)
	require.True(t, ok, "the slow replica never rejected")
	sent := slow.count(0, c.at.Add(2*fleetFlush+delay+binSlack), c.at.Add(time.Second))
	t.Logf("the slow replica rejected %v after the fleet opened; calls it sent from then+400 ms to +1 s: %d", d, sent)
	assert.LessOrEqual(t, d, 2*fleetFlush+delay+binSlack)
	assert.Zero(t, sent)
	lost, back := slow.sharing(time.Time{})
	assert.True(t, lost && back.IsZero(), "the slow replica's flushes never got their answer in time")
}
