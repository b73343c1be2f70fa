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

	"github.com/resiliencekit/resiliencekit/redis/breakerstore"
	"github.com/resiliencekit/resiliencekit/redis/redistest"
	"github.com/resiliencekit/resiliencekit/resilience"
)

// The fleet's timings in these tests: OpenTimeout 1 s, FlushInterval 100
// ms, so the bound of a recovery is 1.2 s.
const (
	fleetOpen  = time.Second
	fleetFlush = 100 * time.Millisecond
	binSlack   = 2 * binWidth // a bin's width, each end
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

// TestFleetRecoversWithDefaultOptions: 3 replica processes with the
// default options (ConsecutiveFailures(5) beside the failure rate), an
// outage of 3 s that opens the fleet (and every replica's own breaker),
// then a healthy dependency: the fleet closes, with exactly
// HalfOpenRequests probes, and every replica serves, within OpenTimeout
// and two flush intervals. Repeated (RESILIENCEKIT_FLEET_ROUNDS, 2 by
// default; 10 for the figures of docs/shared-breaker.md).
func TestFleetRecoversWithDefaultOptions(t *testing.T) {
	skipUnlessProcesses(t)
	srv := redistest.Start(t)
	dep := newDependency(t)
	name := fleetName(t)
	store := breakerstore.New(srv.Client(), "fleet:")
	w := watchFleet(t, store, name)
	var rs []*replica
	for range 3 {
		r := startReplica(t, defaultReplica([]string{srv.Addr()}, name, dep.srv.URL))
		r.send("run")
		rs = append(rs, r)
	}
	time.Sleep(300 * time.Millisecond)
	type round struct {
		healthy, closed time.Time
		probes          int64
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
		time.Sleep(300 * time.Millisecond) // serving
		done = append(done, round{healthy, c.at, dep.probes.Load()})
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
		t.Logf("round %d: fleet closed %v after the dependency was healthy, replicas serving after %v, %d probes",
			i, rd.closed.Sub(rd.healthy).Round(time.Millisecond), serving, rd.probes)
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
	for _, how := range []string{"killed", "frozen"} {
		t.Run(how, func(t *testing.T) {
			srv := redistest.Start(t)
			dep := newDependency(t)
			name := fleetName(t)
			w := watchFleet(t, breakerstore.New(srv.Client(), "fleet:"), name)
			var rs []*replica
			for range 3 {
				r := startReplica(t, defaultReplica([]string{srv.Addr()}, name, dep.srv.URL))
				r.send("run")
				rs = append(rs, r)
			}
			time.Sleep(200 * time.Millisecond)
			dep.down.Store(true)
			start := time.Now()
			_, ok := w.next(resilience.StateOpen, start, 3*time.Second)
			require.True(t, ok, "the fleet opened")
			if how == "killed" {
				srv.Kill()
			} else {
				srv.Freeze()
				defer srv.Thaw()
			}
			dep.down.Store(false)
			healthy := time.Now()
			time.Sleep(fleetOpen + 5*fleetFlush)
			for i, r := range rs {
				r.quit()
				d, ok := r.first(0, healthy)
				require.True(t, ok, "replica %d never served", i)
				t.Logf("replica %d: first success %v after Redis went and the dependency recovered; Close took %v", i, d, r.close)
				assert.LessOrEqual(t, d, fleetOpen+2*fleetFlush+binSlack)
				assert.LessOrEqual(t, r.close, 2*fleetFlush+50*time.Millisecond, "Close is bounded")
			}
		})
	}
}

// TestFleetCutOffReplicaDoesNotReopen: a replica cut off from Redis
// (every byte dropped) during an outage, and back after the fleet
// recovered, does not reopen it with its old counts; no healthy replica
// rejects a call after the recovery; and the fleet's totals are exactly
// the calls made in its generation.
func TestFleetCutOffReplicaDoesNotReopen(t *testing.T) {
	skipUnlessProcesses(t)
	srv := redistest.Start(t)
	dep := newDependency(t)
	name := fleetName(t)
	store := breakerstore.New(srv.Client(), "fleet:")
	w := watchFleet(t, store, name)
	link := redistest.NewProxy(t, srv.Addr())
	var rs []*replica
	for i := range 3 {
		addr := srv.Addr()
		if i == 2 {
			addr = link.Addr()
		}
		cfg := defaultReplica([]string{addr}, name, dep.srv.URL)
		cfg.Consecutive = 0 // the failure rate alone: the cut-off replica piles up failures
		cfg.Min, cfg.WindowMS = 20, 10000
		r := startReplica(t, cfg)
		r.send("run")
		rs = append(rs, r)
	}
	cut := rs[2]
	time.Sleep(300 * time.Millisecond)
	link.Cut()
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
	srv := redistest.Start(t)
	c := srv.Client()
	flushRateWhileHalfOpen(t, []string{srv.Addr()}, breakerstore.New(c, "fleet:"), func() int64 { return scriptCalls(t, c) })
}

// flushRateWhileHalfOpen runs TestFleetFlushRateWhileHalfOpen on the
// servers at addrs; scripts says how many scripts they have run.
func flushRateWhileHalfOpen(t *testing.T, addrs []string, store *breakerstore.Store, scripts func() int64) {
	dep := newDependency(t)
	name := fleetName(t)
	w := watchFleet(t, store, name)
	var rs []*replica
	for range 3 {
		cfg := defaultReplica(addrs, name, dep.srv.URL)
		cfg.PauseUS = 200 // busy
		r := startReplica(t, cfg)
		r.send("run")
		rs = append(rs, r)
	}
	time.Sleep(200 * time.Millisecond)
	dep.down.Store(true)
	start := time.Now()
	_, ok := w.next(resilience.StateOpen, start, 3*time.Second)
	require.True(t, ok, "the fleet opened")
	dep.hung.Store(true) // the probe hangs
	dep.down.Store(false)
	time.Sleep(fleetOpen + 5*fleetFlush) // half-open, the probe running
	before, from := scripts(), time.Now()
	time.Sleep(time.Second)
	calls, took := scripts()-before, time.Since(from)
	probes := dep.probes.Load()
	dep.unhang()
	for _, r := range rs {
		r.quit()
	}
	var rejected int
	for _, r := range rs {
		rejected += r.count(2, from, from.Add(took))
	}
	perSecond := float64(calls) / took.Seconds()
	t.Logf("half-open with its probe hung: %.1f script calls/s fleet-wide (nominal %.0f), %d calls rejected meanwhile, %d probe(s)",
		perSecond, 3/fleetFlush.Seconds(), rejected, probes)
	assert.LessOrEqual(t, perSecond, 1.1*3/fleetFlush.Seconds())
	assert.Greater(t, rejected, 1000, "calls were rejected meanwhile")
	assert.EqualValues(t, 1, probes)
}

// TestFleetSlowLinkLearnsTheOpening: one replica's link to Redis delays
// every byte 200 ms each way, more than its flush interval (100 ms) for a
// round trip: it learns that the fleet opened (on the others' failures)
// from the published change, and rejects within two flush intervals and
// its link's delay.
func TestFleetSlowLinkLearnsTheOpening(t *testing.T) {
	skipUnlessProcesses(t)
	srv := redistest.Start(t)
	dep := newDependency(t)
	name := fleetName(t)
	w := watchFleet(t, breakerstore.New(srv.Client(), "fleet:"), name)
	const delay = 200 * time.Millisecond
	link := redistest.NewProxy(t, srv.Addr())
	link.Delay(delay)
	var rs []*replica
	for i := range 3 {
		cfg := defaultReplica([]string{srv.Addr()}, name, dep.srv.URL)
		cfg.OpenMS, cfg.Consecutive = 10000, 0
		if i == 2 {
			cfg.Addrs = []string{link.Addr()}
			cfg.Dependency = dep.srv.URL + "/always" // its own calls succeed: only the fleet can stop them
		}
		r := startReplica(t, cfg)
		r.send("run")
		rs = append(rs, r)
	}
	slow := rs[2]
	// Every replica subscribed, the slow one through its link, and the test.
	require.Eventually(t, func() bool {
		n, err := srv.Client().PubSubNumSub(context.Background(), "fleet:{"+name+"}:changes").Result()
		return err == nil && n["fleet:{"+name+"}:changes"] == 4
	}, 10*time.Second, 10*time.Millisecond, "subscribed")
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
}
