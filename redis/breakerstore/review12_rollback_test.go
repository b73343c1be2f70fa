package breakerstore_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/redis/breakerstore"
	"github.com/resiliencekit/resiliencekit/redis/redistest"
	"github.com/resiliencekit/resiliencekit/resilience"
)

func r12opts(store breaker.SharedStore) []breaker.Option {
	return []breaker.Option{breaker.Shared(store), breaker.FlushInterval(flush),
		breaker.ConsecutiveFailures(0), breaker.FailureRate(0.5, 20), breaker.Window(20*time.Second, 10),
		breaker.OpenTimeout(300 * time.Millisecond), breaker.HalfOpenRequests(1)}
}

func r12policy() breaker.FleetPolicy {
	return breaker.FleetPolicy{Rate: 0.5, MinRequests: 20, Window: 20 * time.Second, Buckets: 10, OpenTimeout: 300 * time.Millisecond, HalfOpenRequests: 1, FlushInterval: flush}
}

// TestReview12NewReplicaAfterRollbackReopens: the snapshot holds 19
// failures (one short), the fleet opens on one more and recovers; Redis
// comes back from the snapshot; a replica that starts then (generation
// unknown) flushes before the up-to-date ones: its healthy calls count
// with the snapshot's failures.
func TestReview12NewReplicaAfterRollbackReopens(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	name := fmt.Sprintf("r12-%d", time.Now().UnixNano())
	p := r12policy()
	direct := breakerstore.New(srv.Client(), "test:")
	var olds []*breaker.Breaker
	var links []*redistest.Proxy
	for range 2 {
		px := redistest.NewProxy(t, srv.Addr())
		links = append(links, px)
		c := redisClient(t, px.Addr())
		b := breaker.New(name, r12opts(breakerstore.New(c, "test:"))...)
		t.Cleanup(func() { _ = b.Close() })
		olds = append(olds, b)
	}
	ok := func(context.Context) error { return nil }
	r12recovered(t, srv, direct, name, olds)
	before, _ := direct.Read(ctx, name, p)
	t.Logf("recovered: %+v", before)
	time.Sleep(3 * flush)

	for _, px := range links {
		px.Cut()
	}
	srv.Kill()
	srv.Restart()
	st, err := direct.Read(ctx, name, p)
	require.NoError(t, err)
	t.Logf("restored from snapshot: %+v", st)

	// A replica starting now, on its own link (not cut).
	newcomer := breaker.New(name, r12opts(breakerstore.New(srv.Client(), "test:"))...)
	t.Cleanup(func() { _ = newcomer.Close() })
	for range 2 {
		require.NoError(t, newcomer.Execute(ctx, ok))
	}
	time.Sleep(3 * flush)
	after, _ := direct.Read(ctx, name, p)
	t.Logf("after the newcomer's first flush: %+v", after)
	for _, px := range links {
		px.Heal()
	}
	time.Sleep(3 * flush)
	rejected := 0
	for range 50 {
		for _, b := range append(olds, newcomer) {
			if err := b.Execute(ctx, ok); breaker.IsRejection(err) {
				rejected++
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Logf("healthy calls rejected: %d of 150", rejected)
	require.Zero(t, rejected, "a fleet reopened on the snapshot's failures")
}

// r12recovered has olds gather 19 failures (one short of opening), takes
// an RDB snapshot, opens the fleet with one more, and recovers it.
func r12recovered(t *testing.T, srv *redistest.Server, direct *breakerstore.Store, name string, olds []*breaker.Breaker) {
	ctx := context.Background()
	p := r12policy()
	fail := func(context.Context) error { return errDown }
	ok := func(context.Context) error { return nil }
	// A replica that has heard no generation sends its first counts once
	// (a store restarted since could count them twice): on a loaded
	// machine its first flush can time out and lose them. Counted after.
	require.Eventually(t, func() bool {
		for _, b := range olds {
			if b.Snapshot().Generation == 0 {
				return false
			}
		}
		return true
	}, 5*time.Second, 10*time.Millisecond)
	for range 19 {
		_ = olds[0].Execute(ctx, fail)
	}
	require.Eventually(t, func() bool {
		st, err := direct.Read(ctx, name, p)
		return err == nil && st.Failures == 19
	}, 5*time.Second, 10*time.Millisecond)
	require.NoError(t, srv.Client().Save(ctx).Err())
	_ = olds[1].Execute(ctx, fail)
	awaitOpen(t, direct, name, p)
	require.Eventually(t, func() bool {
		for _, b := range olds {
			_ = b.Execute(ctx, ok)
		}
		st, err := direct.Read(ctx, name, p)
		return err == nil && st.State == resilience.StateClosed
	}, 5*time.Second, 20*time.Millisecond)
}

func redisClient(t *testing.T, addr string) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// TestReview12NewReplicaDuringDowntimeRace: no link cut; a replica started
// while Redis is down (restarting from the snapshot) makes healthy calls;
// whoever flushes first after Redis is back decides. Counted over rounds.
func TestReview12NewReplicaDuringDowntimeRace(t *testing.T) {
	reopened := 0
	const rounds = 6
	for i := range rounds {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			srv := redistest.Start(t)
			ctx := context.Background()
			name := fmt.Sprintf("r12-%d", time.Now().UnixNano())
			p := r12policy()
			direct := breakerstore.New(srv.Client(), "test:")
			olds := []*breaker.Breaker{}
			for range 2 {
				b := breaker.New(name, r12opts(breakerstore.New(srv.Client(), "test:"))...)
				t.Cleanup(func() { _ = b.Close() })
				olds = append(olds, b)
			}
			ok := func(context.Context) error { return nil }
			r12recovered(t, srv, direct, name, olds)
			time.Sleep(2 * flush)
			srv.Kill()
			time.Sleep(time.Duration(i) * flush / rounds) // the newcomer's phase against the others'
			newcomer := breaker.New(name, r12opts(breakerstore.New(srv.Client(), "test:"))...)
			t.Cleanup(func() { _ = newcomer.Close() })
			stop := make(chan struct{})
			done := make(chan struct{})
			go func() {
				defer close(done)
				for {
					select {
					case <-stop:
						return
					case <-time.After(5 * time.Millisecond):
						_ = newcomer.Execute(ctx, ok)
					}
				}
			}()
			time.Sleep(250 * time.Millisecond)
			srv.Restart()
			first := time.Now()
			var seen []string
			for time.Since(first) < 4*flush {
				st, err := direct.Read(ctx, name, p)
				if err == nil && (len(seen) == 0 || seen[len(seen)-1] != fmt.Sprintf("%v/%d/%d/%d", st.State, st.Generation, st.Requests, st.Failures)) {
					seen = append(seen, fmt.Sprintf("%v/%d/%d/%d", st.State, st.Generation, st.Requests, st.Failures))
				}
				time.Sleep(time.Millisecond)
			}
			t.Logf("after the restart: %v", seen)
			close(stop)
			<-done
			rejected := 0
			for range 30 {
				for _, b := range append(olds, newcomer) {
					if err := b.Execute(ctx, ok); breaker.IsRejection(err) {
						rejected++
					}
				}
				time.Sleep(5 * time.Millisecond)
			}
			t.Logf("healthy calls rejected: %d of 90", rejected)
			if rejected > 0 {
				reopened++
			}
		})
	}
	t.Logf("reopened in %d of %d rounds", reopened, rounds)
	require.Zero(t, reopened)
}

type r12log struct {
	*breakerstore.Store
	t   *testing.T
	tag string
}

func (l r12log) Sync(ctx context.Context, name string, s breaker.Sync) (breaker.Fleet, error) {
	f, err := l.Store.Sync(ctx, name, s)
	l.t.Logf("%s %s sync gen=%d unknown=%v r=%d age=%v -> %+v %v", time.Now().Format("05.000"), l.tag, s.Generation, s.GenerationUnknown, s.Requests, s.CountsAge, f, err)
	return f, err
}

// TestReview12OutageAfterRollbackStillOpens: after a rollback, a real
// outage still opens the fleet.
func TestReview12OutageAfterRollbackStillOpens(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	name := fmt.Sprintf("r12-%d", time.Now().UnixNano())
	p := r12policy()
	direct := breakerstore.New(srv.Client(), "test:")
	var bs []*breaker.Breaker
	for range 3 {
		b := breaker.New(name, r12opts(breakerstore.New(srv.Client(), "test:"))...)
		t.Cleanup(func() { _ = b.Close() })
		bs = append(bs, b)
	}
	fail := func(context.Context) error { return errDown }
	ok := func(context.Context) error { return nil }
	for range 10 {
		_ = bs[0].Execute(ctx, fail)
	}
	time.Sleep(3 * flush)
	require.NoError(t, srv.Client().Save(ctx).Err())
	for range 15 {
		_ = bs[1].Execute(ctx, fail)
	}
	awaitOpen(t, direct, name, p)
	require.Eventually(t, func() bool {
		for _, b := range bs {
			_ = b.Execute(ctx, ok)
		}
		st, err := direct.Read(ctx, name, p)
		return err == nil && st.State == resilience.StateClosed
	}, 5*time.Second, 20*time.Millisecond)
	time.Sleep(2 * flush)
	srv.Kill()
	// The outage starts while Redis restarts, and goes on.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for _, b := range bs {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				case <-time.After(10 * time.Millisecond):
					_ = b.Execute(ctx, fail)
				}
			}
		})
	}
	defer func() { close(stop); wg.Wait() }()
	time.Sleep(150 * time.Millisecond)
	srv.Restart()
	start := time.Now()
	var seen []string
	require.Eventually(t, func() bool {
		st, err := direct.Read(ctx, name, p)
		if v := fmt.Sprintf("%v/%d/%d/%d", st.State, st.Generation%100000, st.Requests, st.Failures); err == nil && (len(seen) == 0 || seen[len(seen)-1] != v) {
			seen = append(seen, fmt.Sprintf("%v %s", time.Since(start).Round(time.Millisecond), v))
		}
		return err == nil && st.State != resilience.StateClosed
	}, 3*time.Second, 5*time.Millisecond, "the outage opens the fleet")
	t.Logf("%v", seen)
	t.Logf("opened %v after Redis came back", time.Since(start))
}
