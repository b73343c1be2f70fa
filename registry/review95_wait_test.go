package registry_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/registry"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

// Calls that wait for an open breaker (WaitWhenOpen), then succeed: each
// is one call and one success; Waited counts the calls that waited.
func TestReview95WaitWhenOpenCounts(t *testing.T) {
	r := registry.New()
	b := breaker.New("w95", breaker.ConsecutiveFailures(1), breaker.OpenTimeout(20*time.Millisecond))
	p, _ := r.AddPipeline(pipeline.New(pipeline.WithBreaker(b), pipeline.WaitWhenOpen(), pipeline.WithTimeBudget(2*time.Second),
		pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(2), retrypolicy.BaseDelay(time.Millisecond)))))
	pipeline.Do(context.Background(), p, func(context.Context) (int, error) { return 0, errors.New("down") }) // opens it
	var wg sync.WaitGroup
	var okN, failN int
	var mu sync.Mutex
	for range 20 {
		wg.Go(func() {
			_, err := pipeline.Do(context.Background(), p, func(context.Context) (int, error) { return 1, nil })
			mu.Lock()
			defer mu.Unlock()
			if err == nil {
				okN++
			} else {
				failN++
				t.Logf("waiter failed: %v", err)
			}
		})
	}
	wg.Wait()
	s := r95State(t, r, p, "w95")
	t.Logf("ok %d failed %d: %+v", okN, failN, s)
	if s.Calls != 21 || s.Successes != uint64(okN) || s.Waited > 20 {
		t.Errorf("calls %d successes %d (want %d) waited %d", s.Calls, s.Successes, okN, s.Waited)
	}
	if s.Waiting != 0 {
		t.Errorf("Waiting %d after all returned", s.Waiting)
	}
}
