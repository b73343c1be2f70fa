package idempotencystore_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/resiliencekit/resiliencekit/idempotency"
	"github.com/resiliencekit/resiliencekit/redis/idempotencystore"
	"github.com/resiliencekit/resiliencekit/redis/redistest"
)

const r25Timeout = 100 * time.Millisecond // the guard's StoreTimeout, as storeCtx bounds each call

func r25Begin(s *idempotencystore.Store, key string) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(context.Background(), r25Timeout)
	defer cancel()
	start := time.Now()
	_, err := s.Begin(ctx, key, idempotency.Record{Fingerprint: "f", Token: key}, time.Minute)
	return time.Since(start), err
}

// docs/idempotency.md: "Each store call is bounded (idempotency.StoreTimeout)";
// New: "c must have ContextTimeoutEnabled, so that the middleware's time
// bound on each call holds even against a frozen server". checkEviction
// holds the store's mutex across CONFIG GET; a read that fails is not
// cached, so against a frozen server every concurrent Begin runs its own
// CONFIG GET in turn under the lock, and the n-th waits n store timeouts
// on a mutex that ignores its context.
func TestReview25_FrozenServerBeginsSerializeOnEvictionLock(t *testing.T) {
	srv := redistest.Start(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true, MaxRetries: -1, PoolSize: 64})
	defer c.Close()
	require.NoError(t, c.Ping(context.Background()).Err())
	s := idempotencystore.New(c, "r25:")
	srv.Freeze()
	defer srv.Thaw()

	const n = 12
	var wg sync.WaitGroup
	took := make([]time.Duration, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			took[i], _ = r25Begin(s, fmt.Sprintf("k%d", i))
		}()
	}
	wg.Wait()
	var worst time.Duration
	for _, d := range took {
		worst = max(worst, d)
	}
	t.Logf("Begin durations against a frozen server (bound %v): %v", r25Timeout, took)
	assert.Less(t, worst, 4*r25Timeout, "a Begin must return within about its store timeout")
}

// On a cluster, a frozen master's unread policy holds the lock for keys of
// healthy masters too: their Begins wait on the mutex past their own
// deadline and then fail, though their master answers.
func TestReview25_FrozenMasterFailsClaimsOnHealthyMasters(t *testing.T) {
	cl := redistest.StartCluster(t, 3, 0)
	client := cl.Client()
	s := idempotencystore.New(client, "")
	frozen := cl.Nodes[0]
	var onFrozen, onHealthy []string
	for i := 0; len(onFrozen) < 8 || len(onHealthy) < 8; i++ {
		k := fmt.Sprintf("key-%d", i)
		if cl.MasterOf("idempotency:"+k).Addr() == frozen.Addr() {
			if len(onFrozen) < 8 {
				onFrozen = append(onFrozen, k)
			}
		} else if len(onHealthy) < 8 {
			onHealthy = append(onHealthy, k)
		}
	}
	// Warm: the client knows the slots; the healthy masters' policies are read (cached for a minute).
	for _, k := range onHealthy {
		_, err := r25Begin(s, k) // keys of healthy masters only
		require.NoError(t, err)
	}
	frozen.Freeze()
	defer frozen.Thaw()

	var wg sync.WaitGroup
	var mu sync.Mutex
	var healthyErrs []error
	var healthyWorst time.Duration
	for i := range 8 {
		wg.Add(2)
		go func() {
			defer wg.Done()
			d, err := r25Begin(s, onFrozen[i])
			t.Logf("frozen-master Begin %v %v", d, err)
		}()
		go func() {
			defer wg.Done()
			time.Sleep(20 * time.Millisecond) // behind a frozen master's check
			d, err := r25Begin(s, onHealthy[i])
			mu.Lock()
			defer mu.Unlock()
			healthyWorst = max(healthyWorst, d)
			if err != nil {
				healthyErrs = append(healthyErrs, err)
			}
		}()
	}
	wg.Wait()
	t.Logf("healthy masters' Begins: worst %v, %d of 8 failed: %v", healthyWorst, len(healthyErrs), healthyErrs)
	// Control: with no claim of the frozen master's in flight, the same
	// healthy masters answer at once (the cluster has not failed over).
	d, err := r25Begin(s, onHealthy[0])
	t.Logf("control: healthy Begin alone %v %v", d, err)
	require.NoError(t, err, "control")
	assert.Empty(t, healthyErrs, "claims on healthy masters must not fail for a frozen one")
	assert.Less(t, healthyWorst, 4*r25Timeout)
}

// Steady load: claims keep arriving, every 10 ms, alternately for keys of
// the frozen master and of healthy ones. Each claim of the frozen master
// holds the store's mutex across its CONFIG GET until its own deadline,
// so the healthy masters' claims queue behind them and reach the lock
// at about their own deadlines: they take a whole store timeout, and
// many fail, while a claim alone answers in about a millisecond.
func TestReview25_FrozenMasterSteadyLoadStallsHealthyMasters(t *testing.T) {
	cl := redistest.StartCluster(t, 3, 0)
	s := idempotencystore.New(cl.Client(), "")
	frozen := cl.Nodes[0]
	var onFrozen, onHealthy []string
	for i := 0; len(onFrozen) < 30 || len(onHealthy) < 31; i++ {
		k := fmt.Sprintf("key-%d", i)
		if cl.MasterOf("idempotency:"+k).Addr() == frozen.Addr() {
			onFrozen = append(onFrozen, k)
		} else {
			onHealthy = append(onHealthy, k)
		}
	}
	_, err := r25Begin(s, onHealthy[30]) // reads both healthy masters' policies? one at least; and the slots
	require.NoError(t, err)
	for _, k := range onHealthy[:30] { // warm every healthy master's policy
		_, err := r25Begin(s, k)
		require.NoError(t, err)
	}
	frozen.Freeze()
	defer frozen.Thaw()

	var wg sync.WaitGroup
	var mu sync.Mutex
	failed, slow := 0, 0
	start := time.Now()
	for i := range 30 {
		time.Sleep(time.Until(start.Add(time.Duration(i) * 10 * time.Millisecond)))
		wg.Add(2)
		go func() { defer wg.Done(); _, _ = r25Begin(s, onFrozen[i]) }()
		go func() {
			defer wg.Done()
			time.Sleep(5 * time.Millisecond)
			d, err := r25Begin(s, onHealthy[i])
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				failed++
			}
			if d > r25Timeout/2 {
				slow++
			}
		}()
	}
	wg.Wait()
	t.Logf("over %v: healthy masters' claims: %d of 30 failed, %d of 30 took over %v", time.Since(start), failed, slow, r25Timeout/2)
	d, err := r25Begin(s, onHealthy[0])
	require.NoError(t, err, "control: a healthy master answers alone (%v)", d)
	assert.Zero(t, failed, "claims on healthy masters must not fail for a frozen one")
	assert.Less(t, slow, 5, "claims on healthy masters must not wait out a store timeout for a frozen one")
}
