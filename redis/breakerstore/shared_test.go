package breakerstore_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/redis/breakerstore"
	"github.com/resiliencekit/resiliencekit/redis/redistest"
	"github.com/resiliencekit/resiliencekit/resilience"
)

// TestMain checks that no test leaves a goroutine behind, but go-redis's
// own dialer probe: after a pool's dials failed PoolSize times, it dials
// once a second, and sees that its client was closed only after its sleep.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreAnyFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).tryDial"))
}

var errDown = errors.New("connection refused")

const flush = 100 * time.Millisecond

// replicas returns n breakers of one name on srv, each with a client of
// its own, as n processes would have, closed when the test ends.
func replicas(t *testing.T, srv *redistest.Server, n int, opts ...breaker.Option) []*breaker.Breaker {
	name := fmt.Sprintf("%s-%d", t.Name(), time.Now().UnixNano())
	var bs []*breaker.Breaker
	for range n {
		o := append([]breaker.Option{breaker.Shared(breakerstore.New(srv.Client(), "test:")), breaker.FlushInterval(flush)}, opts...)
		b := breaker.New(name, o...)
		t.Cleanup(func() { _ = b.Close() })
		bs = append(bs, b)
	}
	return bs
}

// fleetTotals sums the fleet's counts in Redis.
func fleetTotals(t *testing.T, c *redis.Client) (requests, failures int64) {
	keys, err := c.Keys(context.Background(), "test:*:b:*").Result()
	require.NoError(t, err)
	for _, k := range keys {
		v, err := c.HMGet(context.Background(), k, "r", "f").Result()
		require.NoError(t, err)
		var r, f int64
		fmt.Sscan(fmt.Sprint(v[0]), &r)
		fmt.Sscan(fmt.Sprint(v[1]), &f)
		requests += r
		failures += f
	}
	return requests, failures
}

// TestFleetCountsAreExact: 3 replicas x 16 goroutines x 1000 calls, 30%
// failing: after a final flush the fleet's totals are the calls made.
func TestFleetCountsAreExact(t *testing.T) {
	srv := redistest.Start(t)
	bs := replicas(t, srv, 3, breaker.ConsecutiveFailures(0), breaker.FailureRate(0.9, 100), breaker.Window(time.Minute, 6))
	var wg sync.WaitGroup
	for _, b := range bs {
		for g := range 16 {
			wg.Go(func() {
				for i := range 1000 {
					_ = b.Execute(context.Background(), func(context.Context) error {
						if (g*1000+i)%10 < 3 {
							return errDown
						}
						return nil
					})
				}
			})
		}
	}
	wg.Wait()
	for _, b := range bs {
		require.NoError(t, b.Close())
	}
	r, f := fleetTotals(t, srv.Client())
	assert.EqualValues(t, 3*16*1000, r)
	assert.EqualValues(t, 3*16*300, f)
}

// TestFleetOpensWithinTwoFlushes: when the fleet's failure rate crosses
// the threshold, every replica rejects within two flush intervals.
func TestFleetOpensWithinTwoFlushes(t *testing.T) {
	srv := redistest.Start(t)
	bs := replicas(t, srv, 3, breaker.ConsecutiveFailures(0), breaker.FailureRate(0.5, 30), breaker.Window(10*time.Second, 10),
		breaker.OpenTimeout(time.Minute))
	var firstFailure atomic.Int64
	rejectedAt := make([]atomic.Int64, len(bs))
	var wg sync.WaitGroup
	start := time.Now()
	for i, b := range bs {
		wg.Go(func() {
			for time.Since(start) < 2*time.Second && rejectedAt[i].Load() == 0 {
				err := b.Execute(context.Background(), func(context.Context) error {
					firstFailure.CompareAndSwap(0, int64(time.Since(start)))
					return errDown
				})
				if errors.Is(err, breaker.ErrOpen) {
					rejectedAt[i].Store(int64(time.Since(start)))
				}
				time.Sleep(5 * time.Millisecond) // 200 calls/s a replica: the threshold is met within a flush
			}
		})
	}
	wg.Wait()
	var at []time.Duration
	for i := range rejectedAt {
		require.NotZero(t, rejectedAt[i].Load(), "replica %d never rejected", i)
		at = append(at, time.Duration(rejectedAt[i].Load()))
	}
	t.Logf("replicas rejected from %v after the first failure", at)
	// The threshold is met in the first flush interval; the fleet opens at
	// the flush after, and every replica learns it at its next one.
	assert.Less(t, slices.Max(at)-time.Duration(firstFailure.Load()), 3*flush+100*time.Millisecond)
	assert.Less(t, slices.Max(at)-slices.Min(at), 2*flush, "every replica within two flush intervals of the first")
}

// TestOneBadReplicaDoesNotOpenTheFleet: a replica whose calls all fail
// opens its own breaker; the fleet's stays closed for the healthy ones.
// The bad replica's breaker stays open through the test (OpenTimeout
// longer than the test; the default, 100 ms, would half-open it).
func TestOneBadReplicaDoesNotOpenTheFleet(t *testing.T) {
	srv := redistest.Start(t)
	bs := replicas(t, srv, 3, breaker.ConsecutiveFailures(5), breaker.FailureRate(0.5, 30), breaker.Window(10*time.Second, 10),
		breaker.OpenTimeout(time.Minute))
	bad, good := bs[0], bs[1:]
	var goodErrs atomic.Int64
	var wg sync.WaitGroup
	for range 100 {
		_ = bad.Execute(context.Background(), func(context.Context) error { return errDown })
		for _, b := range good {
			wg.Go(func() {
				if b.Execute(context.Background(), func(context.Context) error { return nil }) != nil {
					goodErrs.Add(1)
				}
			})
		}
		time.Sleep(5 * time.Millisecond)
	}
	wg.Wait()
	time.Sleep(2 * flush)
	assert.Equal(t, resilience.StateOpen, bad.State(), "the bad replica's own breaker")
	for _, b := range good {
		assert.Equal(t, resilience.StateClosed, b.State())
	}
	assert.Zero(t, goodErrs.Load())
}

// TestExactlyHalfOpenRequestsProbesFleetWide: 3 replicas x 50 callers at
// the moment the open timeout ends: exactly HalfOpenRequests probes reach
// the dependency.
func TestExactlyHalfOpenRequestsProbesFleetWide(t *testing.T) {
	srv := redistest.Start(t)
	const probes = 2
	bs := replicas(t, srv, 3, breaker.ConsecutiveFailures(0), breaker.FailureRate(0.5, 10), breaker.Window(10*time.Second, 10),
		breaker.OpenTimeout(500*time.Millisecond), breaker.HalfOpenRequests(probes))
	for range 20 { // open the fleet
		_ = bs[0].Execute(context.Background(), func(context.Context) error { return errDown })
	}
	require.Eventually(t, func() bool {
		for _, b := range bs {
			if b.State() != resilience.StateOpen {
				return false
			}
		}
		return true
	}, 2*time.Second, 10*time.Millisecond, "the fleet opens")
	var reached atomic.Int64
	release := make(chan struct{})
	var wg sync.WaitGroup
	deadline := time.Now().Add(2 * time.Second)
	for _, b := range bs {
		for range 50 {
			wg.Go(func() {
				for time.Now().Before(deadline) {
					err := b.Execute(context.Background(), func(context.Context) error {
						reached.Add(1)
						<-release // the probes are slow: nobody waits on them
						return nil
					})
					if err == nil {
						return
					}
					time.Sleep(time.Millisecond)
				}
			})
		}
	}
	time.Sleep(time.Second) // the open timeout ends in there; the probes are granted and running
	assert.EqualValues(t, probes, reached.Load(), "exactly the fleet's probes")
	close(release)
	wg.Wait()
	for _, b := range bs {
		assert.Equal(t, resilience.StateClosed, b.State(), "the probes succeeded: the fleet closed")
	}
}

// TestRedisDownFrozenOrRestartedEmpty: calls go on at full speed with the
// replica's own state; events say sharing stopped and resumed; sharing
// resumes within a second of Redis being back.
func TestRedisDownFrozenOrRestartedEmpty(t *testing.T) {
	srv := redistest.Start(t)
	var mu sync.Mutex
	var events []string
	rec := resilience.ListenerFunc(func(e resilience.Event) {
		mu.Lock()
		defer mu.Unlock()
		events = append(events, e.Kind.String())
	})
	b := replicas(t, srv, 1, breaker.ConsecutiveFailures(0), breaker.FailureRate(0.5, 1000), breaker.Window(10*time.Second, 10),
		breaker.WithListener(rec))[0]
	slowest := func() time.Duration { // the p99 of 2000 calls
		ds := make([]time.Duration, 2000)
		for i := range ds {
			start := time.Now()
			_ = b.Execute(context.Background(), func(context.Context) error { return nil })
			ds[i] = time.Since(start)
		}
		slices.Sort(ds)
		return ds[len(ds)*99/100]
	}
	base := slowest()
	srv.Freeze()
	time.Sleep(3 * flush)
	frozen := slowest()
	srv.Thaw()
	srv.Kill()
	time.Sleep(3 * flush)
	down := slowest()
	srv.Restart() // empty: no persistence
	restarted := time.Now()
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return slices.Contains(events, "shared_state_restored")
	}, 2*time.Second, 10*time.Millisecond)
	t.Logf("p99 of 2000 calls: %v healthy, %v frozen, %v down; shared again after %v", base, frozen, down, time.Since(restarted))
	assert.Less(t, time.Since(restarted), time.Second+200*time.Millisecond)
	assert.Less(t, frozen, base+time.Millisecond, "no call waits on Redis: p99 within 1 ms")
	assert.Less(t, down, base+time.Millisecond)
	mu.Lock()
	assert.Contains(t, events, "shared_state_unavailable")
	mu.Unlock()
}

func TestNewRefusesAClientThatIgnoresDeadlines(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer c.Close()
	assert.Panics(t, func() { breakerstore.New(c, "") })
}

// TestReplicasLearnAnOpeningAtOnce: with a long flush interval, the
// replicas learn that the fleet opened by pub/sub, not at their next tick.
func TestReplicasLearnAnOpeningAtOnce(t *testing.T) {
	srv := redistest.Start(t)
	name := fmt.Sprintf("%s-%d", t.Name(), time.Now().UnixNano())
	var bs []*breaker.Breaker
	for range 3 {
		b := breaker.New(name, breaker.Shared(breakerstore.New(srv.Client(), "test:")), breaker.FlushInterval(2*time.Second),
			breaker.ConsecutiveFailures(0), breaker.FailureRate(0.5, 10), breaker.Window(10*time.Second, 10), breaker.OpenTimeout(time.Minute))
		t.Cleanup(func() { _ = b.Close() })
		bs = append(bs, b)
	}
	time.Sleep(100 * time.Millisecond) // subscribed
	for range 20 {
		_ = bs[0].Execute(context.Background(), func(context.Context) error { return errDown })
	}
	require.NoError(t, bs[0].Close()) // its final flush opens the fleet
	start := time.Now()
	require.Eventually(t, func() bool { return bs[1].State() == resilience.StateOpen && bs[2].State() == resilience.StateOpen },
		time.Second, 5*time.Millisecond, "the others learn it long before their next flush")
	t.Logf("the other replicas knew after %v", time.Since(start))
}

// lostReplies applies a Sync, then says it timed out, n times.
type lostReplies struct {
	breaker.SharedStore
	n atomic.Int64
}

func (l *lostReplies) Sync(ctx context.Context, name string, s breaker.Sync) (breaker.Fleet, error) {
	f, err := l.SharedStore.Sync(ctx, name, s)
	if err == nil && l.n.Add(-1) >= 0 {
		return breaker.Fleet{}, context.DeadlineExceeded
	}
	return f, err
}

// TestCountsAreExactWhenAnswersAreLost: a flush that Redis applied but
// whose answer was lost is sent again, and counted once.
func TestCountsAreExactWhenAnswersAreLost(t *testing.T) {
	srv := redistest.Start(t)
	store := &lostReplies{SharedStore: breakerstore.New(srv.Client(), "test:")}
	store.n.Store(5)
	b := breaker.New(fmt.Sprint("lost-", time.Now().UnixNano()), breaker.Shared(store), breaker.FlushInterval(20*time.Millisecond),
		breaker.ConsecutiveFailures(0), breaker.FailureRate(0.9, 100), breaker.Window(time.Minute, 6))
	for i := range 1000 {
		_ = b.Execute(context.Background(), func(context.Context) error {
			if i%10 < 3 {
				return errDown
			}
			return nil
		})
		if i%100 == 0 {
			time.Sleep(25 * time.Millisecond) // flushes in between, some answers lost
		}
	}
	require.NoError(t, b.Close())
	assert.LessOrEqual(t, store.n.Load(), int64(0), "answers were lost")
	r, f := fleetTotals(t, srv.Client())
	assert.EqualValues(t, 1000, r)
	assert.EqualValues(t, 300, f)
}

// TestBusyReplicaProbesNotAnIdleOne and the fleet stays open until a
// probe closes it.
func TestBusyReplicaProbesNotAnIdleOne(t *testing.T) {
	srv := redistest.Start(t)
	bs := replicas(t, srv, 2, breaker.ConsecutiveFailures(0), breaker.FailureRate(0.5, 10), breaker.Window(10*time.Second, 10),
		breaker.OpenTimeout(300*time.Millisecond))
	busy, idle := bs[0], bs[1]
	for range 20 {
		_ = busy.Execute(context.Background(), func(context.Context) error { return errDown })
	}
	require.Eventually(t, func() bool { return idle.State() == resilience.StateOpen }, time.Second, 5*time.Millisecond)
	opened := time.Now()
	time.Sleep(3 * time.Second) // ten open timeouts: nobody probes
	assert.Equal(t, resilience.StateHalfOpen, idle.State(), "the fleet does not close without a probe")
	var ran time.Duration
	require.Eventually(t, func() bool {
		err := busy.Execute(context.Background(), func(context.Context) error { return nil })
		if err == nil {
			ran = time.Since(opened)
			return true
		}
		return false
	}, time.Second, 5*time.Millisecond, "the busy replica gets the probe, not the idle one")
	t.Logf("the probe ran %v after the fleet opened", ran)
	require.Eventually(t, func() bool { return idle.State() == resilience.StateClosed }, time.Second, 5*time.Millisecond)
}

// TestCutOffReplicaDoesNotProbeForTheFleet: a replica whose own breaker
// is open leaves the fleet's probe to the others, and the fleet closes at
// its first half-open.
func TestCutOffReplicaDoesNotProbeForTheFleet(t *testing.T) {
	srv := redistest.Start(t)
	name := fmt.Sprint("cut-", time.Now().UnixNano())
	mk := func(consecutive uint32) *breaker.Breaker {
		b := breaker.New(name, breaker.Shared(breakerstore.New(srv.Client(), "test:")), breaker.FlushInterval(flush),
			breaker.ConsecutiveFailures(consecutive), breaker.FailureRate(0.5, 10), breaker.Window(10*time.Second, 10),
			breaker.OpenTimeout(300*time.Millisecond))
		t.Cleanup(func() { _ = b.Close() })
		return b
	}
	cut, good := mk(3), mk(0)
	bs := []*breaker.Breaker{cut, good}
	var changes []string
	var mu sync.Mutex
	for range 3 { // cut's own breaker opens
		_ = cut.Execute(context.Background(), func(context.Context) error { return errDown })
	}
	for range 20 { // and the fleet's, on good's failures
		_ = good.Execute(context.Background(), func(context.Context) error { return errDown })
	}
	require.Eventually(t, func() bool { return good.State() == resilience.StateOpen }, time.Second, 5*time.Millisecond)
	deadline := time.Now().Add(2 * time.Second)
	var wg sync.WaitGroup
	for _, b := range bs {
		wg.Go(func() {
			for time.Now().Before(deadline) && good.State() != resilience.StateClosed {
				_ = b.Execute(context.Background(), func(context.Context) error {
					if b == cut {
						mu.Lock()
						changes = append(changes, "cut probed")
						mu.Unlock()
						return errDown // it cannot reach the dependency
					}
					return nil
				})
				time.Sleep(2 * time.Millisecond)
			}
		})
	}
	wg.Wait()
	assert.Equal(t, resilience.StateClosed, good.State(), "closed at the first half-open, by good's probe")
	mu.Lock()
	defer mu.Unlock()
	t.Logf("cut's calls while the fleet was half-open or after: %d", len(changes))
}

// TestCloseIsBoundedWithRedisFrozen and says what it could not send.
func TestCloseIsBoundedWithRedisFrozen(t *testing.T) {
	srv := redistest.Start(t)
	b := replicas(t, srv, 1, breaker.ConsecutiveFailures(0), breaker.FailureRate(0.5, 100), breaker.Window(10*time.Second, 10))[0]
	time.Sleep(50 * time.Millisecond) // subscribed
	_ = b.Execute(context.Background(), func(context.Context) error { return nil })
	srv.Freeze()
	defer srv.Thaw()
	time.Sleep(flush / 2) // a flush may be under way
	start := time.Now()
	err := b.Close()
	took := time.Since(start)
	t.Logf("Close took %v with Redis frozen", took)
	assert.LessOrEqual(t, took, 2*flush+50*time.Millisecond, "a flush interval for the flush under way, one for the last")
	assert.Error(t, err, "the last flush failed: its counts are lost, and Close says so")
}

// TestCloseIsBoundedWhileSubscribingToAFrozenRedis: a breaker made while
// Redis is frozen (or whose subscription to the fleet's changes is set up
// again while it is: a node of a cluster frozen) has its watcher waiting
// for the answer to the new connection's handshake; Close still takes at
// most two flush intervals, not the client's read timeout (3 s).
func TestCloseIsBoundedWhileSubscribingToAFrozenRedis(t *testing.T) {
	srv := redistest.Start(t)
	srv.Freeze()
	defer srv.Thaw()
	b := replicas(t, srv, 1, breaker.ConsecutiveFailures(0), breaker.FailureRate(0.5, 100), breaker.Window(10*time.Second, 10))[0]
	time.Sleep(flush / 2) // subscribing
	start := time.Now()
	_ = b.Close()
	took := time.Since(start)
	t.Logf("Close took %v, its watcher subscribing to a frozen Redis", took)
	assert.LessOrEqual(t, took, 2*flush+50*time.Millisecond)
}

// TestRestartedEmptyWhileOpenStaysOpen: a server restarted empty takes
// back the open state from the replicas.
func TestRestartedEmptyWhileOpenStaysOpen(t *testing.T) {
	srv := redistest.Start(t)
	var changes atomic.Int64
	bs := replicas(t, srv, 2, breaker.ConsecutiveFailures(0), breaker.FailureRate(0.5, 10), breaker.Window(10*time.Second, 10),
		breaker.OpenTimeout(30*time.Second), breaker.WithListener(resilience.ListenerFunc(func(e resilience.Event) {
			if e.Kind == resilience.EventStateChange && strings.HasSuffix(e.Name, "(fleet)") {
				changes.Add(1)
			}
		})))
	for range 20 {
		_ = bs[0].Execute(context.Background(), func(context.Context) error { return errDown })
	}
	require.Eventually(t, func() bool { return bs[1].State() == resilience.StateOpen }, time.Second, 5*time.Millisecond)
	assert.Positive(t, changes.Load(), "the breaker's listener hears the fleet")
	srv.Kill()
	srv.Restart()
	// A replica that sees no fleet state for 3 flush intervals decides
	// alone meanwhile (bs[1] would be closed): once the server answers
	// again, the replicas give it back the open state, within a few
	// flushes of their reconnecting, which a loaded machine delays.
	for i, b := range bs {
		assert.Eventually(t, func() bool { return b.State() == resilience.StateOpen }, 5*time.Second, 10*time.Millisecond, "replica %d open again after the restart", i)
	}
	time.Sleep(500 * time.Millisecond) // several flushes more
	for _, b := range bs {
		assert.Equal(t, resilience.StateOpen, b.State(), "still open after the restart")
	}
}

// TestCloseSendsWhatAFailedFlushLeftBehind: counts made after a flush
// failed go with Close's flushes, once Redis answers again.
func TestCloseSendsWhatAFailedFlushLeftBehind(t *testing.T) {
	srv := redistest.Start(t)
	store := &lostReplies{SharedStore: breakerstore.New(srv.Client(), "test:")}
	b := breaker.New(fmt.Sprint("close-", time.Now().UnixNano()), breaker.Shared(store), breaker.FlushInterval(50*time.Millisecond),
		breaker.ConsecutiveFailures(0), breaker.FailureRate(0.9, 100), breaker.Window(time.Minute, 6))
	call := func(n int) {
		for range n {
			_ = b.Execute(context.Background(), func(context.Context) error { return nil })
		}
	}
	call(10)
	time.Sleep(120 * time.Millisecond) // flushed
	store.n.Store(1)                   // the next flush's answer is lost
	call(5)
	time.Sleep(120 * time.Millisecond) // that flush, applied, unanswered, and its batch kept
	store.n.Store(-1000)
	call(3) // after the batch was formed
	require.NoError(t, b.Close())
	r, _ := fleetTotals(t, srv.Client())
	assert.EqualValues(t, 18, r, "each count once: none lost, none twice")
}

// TestNewReplicaCountsInTheCurrentGeneration: a replica that starts while
// the fleet is in a later generation has its first calls, made before it
// heard any generation, counted in the current one.
func TestNewReplicaCountsInTheCurrentGeneration(t *testing.T) {
	srv := redistest.Start(t)
	name := fmt.Sprint("late-", time.Now().UnixNano())
	opts := []breaker.Option{breaker.Shared(breakerstore.New(srv.Client(), "test:")), breaker.FlushInterval(flush),
		breaker.ConsecutiveFailures(0), breaker.FailureRate(0.5, 10), breaker.Window(10*time.Second, 10),
		breaker.OpenTimeout(200 * time.Millisecond)}
	first := breaker.New(name, opts...)
	t.Cleanup(func() { _ = first.Close() })
	for range 20 {
		_ = first.Execute(context.Background(), func(context.Context) error { return errDown })
	}
	require.Eventually(t, func() bool { return first.FleetState() == resilience.StateOpen }, time.Second, 5*time.Millisecond)
	var last string
	require.Eventually(t, func() bool { // then closed by a probe: a later generation
		_ = first.Execute(context.Background(), func(context.Context) error { return nil })
		st, err := first.Fleet(context.Background())
		last = fmt.Sprint(st, err)
		return err == nil && st.State == resilience.StateClosed && st.Generation >= 2
	}, 3*time.Second, 5*time.Millisecond, "last: %s", &last)
	require.NoError(t, first.Close())
	before, err := first.Fleet(context.Background())
	require.NoError(t, err)

	late := breaker.New(name, opts...)
	for range 100 { // before its first flush
		require.NoError(t, late.Execute(context.Background(), func(context.Context) error { return nil }))
	}
	require.NoError(t, late.Close())
	after, err := late.Fleet(context.Background())
	require.NoError(t, err)
	t.Logf("fleet %+v, then %+v", before, after)
	assert.Equal(t, before.Generation, after.Generation)
	assert.EqualValues(t, 100, after.Requests-before.Requests)
}
