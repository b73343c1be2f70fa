package breakerstore_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/redis/breakerstore"
	"github.com/resiliencekit/resiliencekit/redis/redistest"
	"github.com/resiliencekit/resiliencekit/resilience"
)

var errDown = errors.New("connection refused")

func uniqueName(t *testing.T) string {
	return fmt.Sprintf("%s-%d", t.Name(), time.Now().UnixNano())
}

func TestReplicasShareState(t *testing.T) {
	servers := map[string]func(t *testing.T) *redis.Client{
		"miniredis": func(t *testing.T) *redis.Client { c, _ := redistest.Mini(t); return c },
		"redis":     func(t *testing.T) *redis.Client { return redistest.Real(t) },
	}
	for name, server := range servers {
		t.Run(name, func(t *testing.T) {
			c := server(t)
			dep := uniqueName(t)
			replica := func() *breaker.Breaker {
				// Each replica has its own client and store, as separate processes would.
				own := redis.NewClient(c.Options())
				t.Cleanup(func() { _ = own.Close() })
				return breaker.New(dep, breaker.ConsecutiveFailures(3), breaker.OpenTimeout(300*time.Millisecond),
					breaker.Shared(breakerstore.New(own, "test:")))
			}
			a, b := replica(), replica()
			var calls atomic.Int64
			fail := func(context.Context) error { calls.Add(1); return errDown }
			ok := func(context.Context) error { calls.Add(1); return nil }

			var wg sync.WaitGroup
			wg.Go(func() {
				for range 3 {
					assert.ErrorIs(t, a.Execute(context.Background(), fail), errDown)
				}
			})
			wg.Wait()
			assert.Equal(t, breaker.Open, a.State())

			wg.Go(func() {
				assert.Equal(t, breaker.Open, b.State(), "failures through one replica open the other")
				assert.ErrorIs(t, b.Execute(context.Background(), ok), breaker.ErrOpen)
				assert.ErrorIs(t, b.Check(), breaker.ErrOpen)
			})
			wg.Wait()
			assert.EqualValues(t, 3, calls.Load())

			time.Sleep(350 * time.Millisecond)
			require.NoError(t, b.Execute(context.Background(), ok), "the probe")
			assert.Equal(t, breaker.Closed, a.State(), "a probe through one replica closes the other")
			assert.EqualValues(t, 4, calls.Load())
		})
	}
}

func TestSharedBreakerSurvivesTheStore(t *testing.T) {
	c, m := redistest.Mini(t)
	var events []string
	var mu sync.Mutex
	listener := resilience.ListenerFunc(func(e resilience.Event) {
		mu.Lock()
		defer mu.Unlock()
		events = append(events, e.Kind.String())
	})
	b := breaker.New(uniqueName(t), breaker.ConsecutiveFailures(2), breaker.Shared(breakerstore.New(c, "")),
		breaker.SharedRetryInterval(20*time.Millisecond), breaker.WithListener(listener))
	ok := func(context.Context) error { return nil }
	require.NoError(t, b.Execute(context.Background(), ok))

	m.Close()
	var calls atomic.Int64
	fail := func(context.Context) error { calls.Add(1); return errDown }
	start := time.Now()
	assert.ErrorIs(t, b.Execute(context.Background(), fail), errDown)
	assert.ErrorIs(t, b.Execute(context.Background(), fail), errDown)
	assert.EqualValues(t, 2, calls.Load(), "calls go on without the store")
	assert.Equal(t, breaker.Open, b.State(), "and the breaker still opens, locally")
	assert.ErrorIs(t, b.Execute(context.Background(), fail), breaker.ErrOpen)
	assert.Less(t, time.Since(start), time.Second, "without stalling")

	require.NoError(t, m.Restart())
	time.Sleep(30 * time.Millisecond)
	_ = b.State()
	mu.Lock()
	defer mu.Unlock()
	assert.Equal(t, []string{"shared_state_unavailable", "state_change", "rejected", "shared_state_restored"}, events)
}

func TestSharedBreakerCountsAPanicAsAFailure(t *testing.T) {
	c, _ := redistest.Mini(t)
	b := breaker.New(uniqueName(t), breaker.ConsecutiveFailures(2), breaker.Shared(breakerstore.New(c, "")))
	for range 2 {
		assert.PanicsWithValue(t, "boom", func() { _ = b.Execute(context.Background(), func(context.Context) error { panic("boom") }) })
	}
	assert.Equal(t, breaker.Open, b.State())
}
