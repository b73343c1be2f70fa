package breakerstore_test

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/redis/breakerstore"
	"github.com/resiliencekit/resiliencekit/redis/redistest"
	"github.com/resiliencekit/resiliencekit/resilience"
)

// cutLink applies a Sync, then loses its answer while lose is set; its
// watcher drops what it hears while deaf is set: a partition that lost
// both the flush's answer and the published change.
type cutLink struct {
	s          *breakerstore.Store
	lose, deaf atomic.Bool
}

func (l *cutLink) Sync(ctx context.Context, name string, s breaker.Sync) (breaker.Fleet, error) {
	f, err := l.s.Sync(ctx, name, s)
	if err == nil && l.lose.Load() {
		return breaker.Fleet{}, context.DeadlineExceeded
	}
	return f, err
}

func (l *cutLink) Watch(ctx context.Context, name string, changed func(breaker.Fleet)) error {
	return l.s.Watch(ctx, name, func(f breaker.Fleet) {
		if !l.deaf.Load() {
			changed(f)
		}
	})
}

// noWatch hides the watcher: a SharedStore that is only a SharedStore.
type noWatch struct{ l *cutLink }

func (n noWatch) Sync(ctx context.Context, name string, s breaker.Sync) (breaker.Fleet, error) {
	return n.l.Sync(ctx, name, s)
}

// TestReview10StaleUnknownBatchAfterRestart: a new replica's first batch
// (10 failures) opens the fleet; the answer AND the publish are lost (a
// cut); the fleet then closes (dependency healthy, a probe succeeded);
// Redis restarts empty; the link heals. The replica re-sends the old
// batch and the fleet reopens from evidence older than the closing.
func TestReview10StaleUnknownBatchAfterRestart(t *testing.T) {
	for _, tc := range []struct {
		name          string
		watcher, deaf bool
	}{
		{"watcher-heard(control)", true, false},
		{"watcher-cut-too", true, true},
		{"store-without-watcher", false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := redistest.Start(t)
			link := &cutLink{s: breakerstore.New(srv.Client(), "test:")}
			link.lose.Store(true)
			link.deaf.Store(tc.deaf)
			var store breaker.SharedStore = link
			if !tc.watcher {
				store = noWatch{link}
			}
			name := fleetName(t)
			b := breaker.New(name, breaker.Shared(store), breaker.FlushInterval(50*time.Millisecond),
				breaker.ConsecutiveFailures(0), breaker.FailureRate(0.5, 10), breaker.Window(10*time.Second, 10),
				breaker.OpenTimeout(100*time.Millisecond), breaker.HalfOpenRequests(1))
			t.Cleanup(func() { _ = b.Close() })
			for range 10 { // before the first flush
				_ = b.Execute(context.Background(), func(context.Context) error { return errDown })
			}
			direct := breakerstore.New(srv.Client(), "test:")
			p := breaker.FleetPolicy{Window: 10 * time.Second, Buckets: 10, OpenTimeout: 100 * time.Millisecond, Rate: 0.5, MinRequests: 10,
				HalfOpenRequests: 1, ProbeTimeout: 150 * time.Millisecond, FlushInterval: 50 * time.Millisecond}
			ctx := context.Background()
			awaitOpen(t, direct, name, p)
			// Another replica probes and closes the fleet: the dependency is back.
			closeAsAnother(t, direct, name, p)
			time.Sleep(150 * time.Millisecond) // the replica's flushes go on, unanswered
			srv.Kill()
			srv.Restart()
			link.lose.Store(false)
			link.deaf.Store(false)
			time.Sleep(1500 * time.Millisecond) // reconnects, several flushes
			st, err := direct.Read(ctx, name, p)
			require.NoError(t, err)
			t.Logf("after the restart: %+v, replica's fleet view %v", st, b.FleetState())
			require.Equal(t, resilience.StateClosed, st.State, "the fleet reopened from failures it had counted before, and that predate its closing")
		})
	}
}

// TestReview10RaceWatcherSwapsWhileCalling: a replica that has heard no
// generation (its flushes' answers lost) under many goroutines calling
// Execute while changes are published in a burst: -race, no panic, and
// after the answers come back its counts of the last generation reach
// the store.
func TestReview10RaceWatcherSwapsWhileCalling(t *testing.T) {
	srv := redistest.Start(t)
	link := &cutLink{s: breakerstore.New(srv.Client(), "test:")}
	link.lose.Store(true)
	name := fleetName(t)
	b := breaker.New(name, breaker.Shared(link), breaker.FlushInterval(10*time.Millisecond),
		breaker.ConsecutiveFailures(0), breaker.FailureRate(0.99, 1000000), breaker.Window(10*time.Second, 10))
	t.Cleanup(func() { _ = b.Close() })
	pub := srv.Client()
	ctx := context.Background()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var calls atomic.Int64
	for range 16 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				_ = b.Execute(ctx, func(context.Context) error { return nil })
				calls.Add(1)
			}
		})
	}
	time.Sleep(100 * time.Millisecond) // subscribed
	base := time.Now().UnixMilli()
	for i := range 200 {
		require.NoError(t, pub.Publish(ctx, "test:{"+name+"}:changes", strconv.FormatInt(base+int64(i), 10)+" 0").Err())
		if i%20 == 0 {
			time.Sleep(7 * time.Millisecond)
		}
	}
	close(stop)
	wg.Wait()
	t.Logf("%d calls", calls.Load())
	_ = b.FleetState()
}

// TestReview10StaleUnknownBatchAfterRestartRealCut: as
// TestReview10StaleUnknownBatchAfterRestart, with a real partition: the
// replica's link (a proxy, 40 ms each way, flush interval 50 ms: every
// answer comes too late) is cut as soon as its first batch opened the
// fleet, so that the published opening is lost with the answer.
func TestReview10StaleUnknownBatchAfterRestartRealCut(t *testing.T) {
	srv := redistest.Start(t)
	px := redistest.NewProxy(t, srv.Addr())
	cl := redis.NewClient(&redis.Options{Addr: px.Addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = cl.Close() })
	name := fleetName(t)
	// A warm connection, the script loaded: no handshake through the slow link.
	_, err := breakerstore.New(cl, "test:").Sync(context.Background(), name+"-warm", breaker.Sync{Policy: breaker.FleetPolicy{Window: time.Second, Buckets: 1}})
	require.NoError(t, err)
	b := breaker.New(name, breaker.Shared(breakerstore.New(cl, "test:")), breaker.FlushInterval(100*time.Millisecond),
		breaker.ConsecutiveFailures(0), breaker.FailureRate(0.5, 10), breaker.Window(10*time.Second, 10),
		breaker.OpenTimeout(100*time.Millisecond), breaker.HalfOpenRequests(1))
	t.Cleanup(func() { _ = b.Close() })
	for range 10 {
		_ = b.Execute(context.Background(), func(context.Context) error { return errDown })
	}
	time.Sleep(50 * time.Millisecond) // subscribed
	px.Delay(60 * time.Millisecond)   // the first flush's answer comes after its deadline
	direct := breakerstore.New(srv.Client(), "test:")
	p := breaker.FleetPolicy{Window: 10 * time.Second, Buckets: 10, OpenTimeout: 100 * time.Millisecond, Rate: 0.5, MinRequests: 10,
		HalfOpenRequests: 1, ProbeTimeout: 150 * time.Millisecond, FlushInterval: 50 * time.Millisecond}
	ctx := context.Background()
	awaitOpen(t, direct, name, p)
	px.Cut() // the answer and the publish are still in the proxy
	closeAsAnother(t, direct, name, p)
	require.Equal(t, resilience.StateClosed, b.FleetState(), "the replica never heard the opening")
	srv.Kill()
	srv.Restart()
	px.Delay(0)
	px.Heal()
	time.Sleep(1500 * time.Millisecond)
	st, err := direct.Read(ctx, name, p)
	require.NoError(t, err)
	t.Logf("after the restart: %+v, replica's fleet view %v", st, b.FleetState())
	require.Equal(t, resilience.StateClosed, st.State, "the fleet reopened from failures it had counted before, and that predate its closing")
}

// TestReview10StaleUnknownBatchAfterSnapshotRestore: as
// TestReview10StaleUnknownBatchAfterRestart, Redis restarted from a
// snapshot taken before the replica's first batch (the fleet closed, in
// an older generation): a batch of an unknown generation does not tell the
// store it went back in time.
func TestReview10StaleUnknownBatchAfterSnapshotRestore(t *testing.T) {
	for _, deaf := range []bool{false, true} {
		t.Run(fmt.Sprint("deaf=", deaf), func(t *testing.T) {
			srv := redistest.Start(t)
			link := &cutLink{s: breakerstore.New(srv.Client(), "test:")}
			direct := breakerstore.New(srv.Client(), "test:")
			name := fleetName(t)
			p := breaker.FleetPolicy{Window: 10 * time.Second, Buckets: 10, OpenTimeout: 100 * time.Millisecond, Rate: 0.5, MinRequests: 10,
				HalfOpenRequests: 1, ProbeTimeout: 150 * time.Millisecond, FlushInterval: 50 * time.Millisecond}
			ctx := context.Background()
			_, err := direct.Sync(ctx, name, breaker.Sync{Policy: p}) // the fleet, closed
			require.NoError(t, err)
			require.NoError(t, srv.Client().Save(ctx).Err(), "the snapshot")
			link.lose.Store(true)
			link.deaf.Store(deaf)
			b := breaker.New(name, breaker.Shared(link), breaker.FlushInterval(50*time.Millisecond),
				breaker.ConsecutiveFailures(0), breaker.FailureRate(0.5, 10), breaker.Window(10*time.Second, 10),
				breaker.OpenTimeout(100*time.Millisecond), breaker.HalfOpenRequests(1))
			t.Cleanup(func() { _ = b.Close() })
			time.Sleep(20 * time.Millisecond) // subscribed
			for range 10 {
				_ = b.Execute(ctx, func(context.Context) error { return errDown })
			}
			awaitOpen(t, direct, name, p)
			closeAsAnother(t, direct, name, p)
			time.Sleep(150 * time.Millisecond)
			srv.Kill()
			srv.Restart() // from the snapshot
			link.lose.Store(false)
			link.deaf.Store(false)
			time.Sleep(1500 * time.Millisecond)
			st, err := direct.Read(ctx, name, p)
			require.NoError(t, err)
			t.Logf("after the restore: %+v, replica's fleet view %v", st, b.FleetState())
			require.Equal(t, resilience.StateClosed, st.State, "the fleet reopened from failures it had counted before, and that predate its closing")
		})
	}
}

// gate refuses every Sync, changing nothing, while shut.
type gate struct {
	*breakerstore.Store
	shut atomic.Bool
}

func (g *gate) Sync(ctx context.Context, name string, s breaker.Sync) (breaker.Fleet, error) {
	if g.shut.Load() {
		return breaker.Fleet{}, errDown
	}
	return g.Store.Sync(ctx, name, s)
}

// TestReview10StaleBatchReopensARecoveredFleet: two real replicas. R's
// first batch (10 failures) opens the fleet; R's link loses the answer
// and the publish. Q probes and closes the fleet (the dependency is
// healthy). Redis restarts empty; R reaches it before Q does (Q's link
// back 300 ms later). R's old batch reopens the fleet: Q rejects calls to
// a healthy dependency.
func TestReview10StaleBatchReopensARecoveredFleet(t *testing.T) {
	srv := redistest.Start(t)
	name := fleetName(t)
	opts := []breaker.Option{breaker.FlushInterval(50 * time.Millisecond),
		breaker.ConsecutiveFailures(0), breaker.FailureRate(0.5, 10), breaker.Window(10*time.Second, 10),
		breaker.OpenTimeout(300 * time.Millisecond), breaker.HalfOpenRequests(1)}
	qs := &gate{Store: breakerstore.New(srv.Client(), "test:")}
	q := breaker.New(name, append([]breaker.Option{breaker.Shared(qs)}, opts...)...)
	t.Cleanup(func() { _ = q.Close() })
	ctx := context.Background()
	ok := func(context.Context) error { return nil }
	time.Sleep(200 * time.Millisecond) // Q knows the fleet's generation
	link := &cutLink{s: breakerstore.New(srv.Client(), "test:")}
	link.lose.Store(true)
	link.deaf.Store(true)
	r := breaker.New(name, append([]breaker.Option{breaker.Shared(link)}, opts...)...)
	t.Cleanup(func() { _ = r.Close() })
	for range 10 {
		_ = r.Execute(ctx, func(context.Context) error { return errDown })
	}
	require.Eventually(t, func() bool { return q.FleetState() == resilience.StateOpen }, 2*time.Second, 5*time.Millisecond, "R's batch opened the fleet")
	require.Eventually(t, func() bool {
		_ = q.Execute(ctx, ok) // Q probes: the dependency is healthy
		return q.FleetState() == resilience.StateClosed
	}, 3*time.Second, 5*time.Millisecond, "Q's probe closed the fleet")
	require.Equal(t, resilience.StateClosed, r.FleetState(), "R never heard")
	time.Sleep(100 * time.Millisecond)
	srv.Kill()
	srv.Restart()
	qs.shut.Store(true)
	link.lose.Store(false)
	link.deaf.Store(false)
	time.Sleep(300 * time.Millisecond)
	qs.shut.Store(false)
	var rejected int
	for end := time.Now().Add(time.Second); time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
		if breaker.IsRejection(q.Execute(ctx, ok)) {
			rejected++
		}
	}
	t.Logf("Q rejected %d calls to a healthy dependency in the second after the restart", rejected)
	require.Zero(t, rejected, "the recovered fleet reopened from R's old batch")
}

// TestReview10HeardBeforeFirstFlushCountsExactly: a replica hears a change
// (a closing) before its first flush: the calls it makes after hearing it
// count, each once, in the new generation; those before it do not.
func TestReview10HeardBeforeFirstFlushCountsExactly(t *testing.T) {
	srv := redistest.Start(t)
	direct := breakerstore.New(srv.Client(), "test:")
	name := fleetName(t)
	p := breaker.FleetPolicy{Window: 10 * time.Second, Buckets: 10, OpenTimeout: 50 * time.Millisecond, Rate: 0.5, MinRequests: 10,
		HalfOpenRequests: 1, ProbeTimeout: 150 * time.Millisecond, FlushInterval: 500 * time.Millisecond}
	ctx := context.Background()
	f0, err := direct.Sync(ctx, name, breaker.Sync{Policy: p})
	require.NoError(t, err)
	f1, err := direct.Sync(ctx, name, breaker.Sync{Batch: "o-1", Requests: 10, Failures: 10, Generation: f0.Generation, Policy: p})
	require.NoError(t, err)
	require.Equal(t, resilience.StateOpen, f1.State)
	r := breaker.New(name, breaker.Shared(breakerstore.New(srv.Client(), "test:")), breaker.FlushInterval(500*time.Millisecond),
		breaker.ConsecutiveFailures(0), breaker.FailureRate(0.5, 1000), breaker.Window(10*time.Second, 10),
		breaker.OpenTimeout(50*time.Millisecond), breaker.HalfOpenRequests(1))
	t.Cleanup(func() { _ = r.Close() })
	for range 7 { // before the closing: the fleet's old generation
		_ = r.Execute(ctx, func(context.Context) error { return errDown })
	}
	time.Sleep(100 * time.Millisecond) // subscribed; half-open
	g, err := direct.Sync(ctx, name, breaker.Sync{Generation: f1.Generation, State: resilience.StateOpen, WantProbe: true, Replica: "o", Policy: p})
	require.NoError(t, err)
	require.True(t, g.ProbeGranted)
	c, err := direct.Sync(ctx, name, breaker.Sync{Batch: "o-2", ProbeSuccesses: 1, Generation: g.Generation, State: resilience.StateHalfOpen, Replica: "o", Policy: p})
	require.NoError(t, err)
	require.Equal(t, resilience.StateClosed, c.State)
	time.Sleep(50 * time.Millisecond) // heard, before R's first flush (500 ms)
	for range 100 {
		require.NoError(t, r.Execute(ctx, func(context.Context) error { return nil }))
	}
	require.NoError(t, r.Close())
	st, err := direct.Read(ctx, name, p)
	require.NoError(t, err)
	require.Equal(t, c.Generation, st.Generation)
	require.EqualValues(t, 100, st.Requests)
	require.EqualValues(t, 0, st.Failures)
}

// awaitOpen waits until the store holds name's fleet open.
func awaitOpen(t *testing.T, direct *breakerstore.Store, name string, p breaker.FleetPolicy) {
	t.Helper()
	require.Eventually(t, func() bool {
		st, err := direct.Read(context.Background(), name, p)
		return err == nil && st.State == resilience.StateOpen
	}, 2*time.Second, time.Millisecond, "the replica's first batch opened the fleet")
}

// closeAsAnother has another replica probe name's open fleet once it is
// half-open, and close it: the dependency is back.
func closeAsAnother(t *testing.T, direct *breakerstore.Store, name string, p breaker.FleetPolicy) {
	t.Helper()
	ctx := context.Background()
	var g breaker.Fleet
	require.Eventually(t, func() bool {
		var err error
		st, _ := direct.Read(ctx, name, p)
		g, err = direct.Sync(ctx, name, breaker.Sync{Generation: st.Generation, State: resilience.StateOpen, WantProbe: true, Replica: "other", Policy: p})
		return err == nil && g.ProbeGranted
	}, 2*time.Second, 10*time.Millisecond)
	c, err := direct.Sync(ctx, name, breaker.Sync{Batch: "other-1", Requests: 1, ProbeSuccesses: 1, Generation: g.Generation, State: resilience.StateHalfOpen, Replica: "other", Policy: p})
	require.NoError(t, err)
	require.Equal(t, resilience.StateClosed, c.State, "closed by the probe")
}
