package pipeline_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

// After an outage, a dependency that comes back in part (one request in
// three fails at random, as behind a load balancer with a dead host in
// three, the others with capacity to spare) is healthy enough for a retry
// to complete nearly every call: the default breaker must not take those
// calls away by failing to close. A breaker that needs several good
// probes in a row to close (5 of them: (2/3)^5, 13% a round) rejected
// about 9% of the calls after the outage here, where one probe rejects
// about 1%.
func TestDefaultsServeADependencyBackInPart(t *testing.T) {
	errDown := errors.New("503")
	okAfter := func(p *pipeline.Pipeline, seed uint64) (ok int64) {
		synctest.Test(t, func(t *testing.T) {
			var mu sync.Mutex
			rng := rand.New(rand.NewPCG(seed, 4))
			start := time.Now()
			var n atomic.Int64
			var wg sync.WaitGroup
			for range 2400 { // 400 calls a second for 6 s, each with a deadline of 1 s
				wg.Go(func() {
					began := time.Since(start)
					ctx, cancel := context.WithTimeout(context.Background(), time.Second)
					defer cancel()
					_, err := pipeline.Do(ctx, p, func(context.Context) (int, error) {
						if time.Since(start) < time.Second { // down for the first second
							time.Sleep(time.Millisecond)
							return 0, errDown
						}
						time.Sleep(5 * time.Millisecond)
						mu.Lock()
						bad := rng.Float64() < 1.0/3
						mu.Unlock()
						if bad {
							return 0, errDown
						}
						return 1, nil
					})
					if began >= time.Second && err == nil {
						n.Add(1)
					}
				})
				time.Sleep(2500 * time.Microsecond)
			}
			wg.Wait()
			ok = n.Load()
		})
		return ok
	}
	var retried, defaults int64
	for seed := range uint64(3) {
		retried += okAfter(pipeline.New(pipeline.WithRetry(retrypolicy.New())), seed)
		defaults += okAfter(pipeline.New(pipeline.WithBreaker(breaker.New("d")), pipeline.WithRetry(retrypolicy.New())), seed)
	}
	t.Logf("calls ok after the outage: retry alone %d, breaker and retry %d (%.1f%%)", retried, defaults, 100*float64(defaults)/float64(retried))
	assert.GreaterOrEqual(t, float64(defaults), 0.97*float64(retried), "the default breaker takes calls away from a dependency back in part")
}
