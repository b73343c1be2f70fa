package pipeline_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/hedge"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/resilience"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

// review32, hiding: the breaker's average is of whole calls from their
// admission, retries and their backoff included, not of the dependency's
// answers. A dependency that fails half its attempts fast (503 in 1 ms)
// and answers the others in 10 ms, behind the default retry policy (100
// ms base delay, full jitter), gives calls that take tens of
// milliseconds on average. When it then hangs, callers with 30 ms
// budgets (three times what an answer takes) time out in their one
// attempt, each left out: the breaker never opens, and every call waits
// out its budget.
func TestReview32RetriedSuccessesHideHang(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := breaker.New("dep")
		p := pipeline.New(pipeline.WithBreaker(b), pipeline.WithRetry(retrypolicy.New()))
		rnd := rand.New(rand.NewPCG(3, 4))
		flaky := func(ctx context.Context) (int, error) {
			if rnd.IntN(2) == 0 {
				time.Sleep(time.Millisecond)
				return 0, errors.New("503") // unclassified: transient
			}
			select {
			case <-ctx.Done():
				return 0, ctx.Err()
			case <-time.After(10 * time.Millisecond):
				return 1, nil
			}
		}
		var total time.Duration
		failed := 0
		for range 400 { // callers without a deadline: nearly all succeed
			start := time.Now()
			if _, err := pipeline.Do(context.Background(), p, flaky); err != nil {
				failed++
			}
			total += time.Since(start)
		}
		t.Logf("calls took %v on average, %d of 400 failed; an answer takes 10 ms", total/400, failed)
		require.Equal(t, resilience.StateClosed, b.State())

		hung := func(ctx context.Context) (int, error) {
			<-ctx.Done()
			return 0, ctx.Err()
		}
		// A call is timed from its admission, its retries included: the
		// slowest of the last minute is past 30 ms, so the hang is
		// hidden until it is over a minute old.
		start := time.Now()
		for b.State() == resilience.StateClosed && time.Since(start) < 2*time.Minute {
			ctx, cancel := context.WithTimeout(context.Background(), 150*time.Millisecond) // 100 ms at least count
			_, err := pipeline.Do(ctx, p, hung)
			cancel()
			require.ErrorIs(t, err, context.DeadlineExceeded)
		}
		t.Logf("opened %v after the dependency hung: %v, %+v", time.Since(start), b.State(), b.Counts())
		assert.Equal(t, resilience.StateOpen, b.State())
		assert.Less(t, time.Since(start), 81*time.Second, "hidden for 80 s at most")
	})
}

// Held (expected to pass): a dependency that answered in 10 ms and then
// hangs opens the breaker through callers with enough time, with retries
// and an attempt timeout, with hedging, and with WaitWhenOpen.
func TestReview32HangOpensThroughStages(t *testing.T) {
	hung := func(ctx context.Context) (int, error) {
		<-ctx.Done()
		return 0, ctx.Err()
	}
	ok := func(ctx context.Context) (int, error) {
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(10 * time.Millisecond):
			return 1, nil
		}
	}
	cases := map[string]struct {
		opts   []pipeline.Option
		budget time.Duration
	}{
		"retry+attempt timeout, budget over it":  {[]pipeline.Option{pipeline.WithRetry(retrypolicy.New(retrypolicy.BaseDelay(time.Millisecond))), pipeline.WithAttemptTimeout(50 * time.Millisecond)}, 80 * time.Millisecond},
		"retry+attempt timeout, budget under it": {[]pipeline.Option{pipeline.WithRetry(retrypolicy.New(retrypolicy.BaseDelay(time.Millisecond))), pipeline.WithAttemptTimeout(200 * time.Millisecond)}, 150 * time.Millisecond},
		"hedging":                                {[]pipeline.Option{pipeline.WithRetry(retrypolicy.New()), pipeline.WithHedging(hedge.New(hedge.Delay(5 * time.Millisecond)))}, 150 * time.Millisecond},
		"wait when open":                         {[]pipeline.Option{pipeline.WithRetry(retrypolicy.New()), pipeline.WaitWhenOpen()}, 150 * time.Millisecond},
		"time budget of its own":                 {[]pipeline.Option{pipeline.WithTimeBudget(40 * time.Millisecond)}, 0},
		"time budget of its own, wait when open": {[]pipeline.Option{pipeline.WithTimeBudget(40 * time.Millisecond), pipeline.WaitWhenOpen()}, 0},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				b := breaker.New("dep")
				p := pipeline.New(append([]pipeline.Option{pipeline.WithBreaker(b)}, c.opts...)...)
				for range 100 {
					_, err := pipeline.Do(context.Background(), p, ok)
					require.NoError(t, err)
				}
				for range 20 {
					ctx, cancel := context.Background(), context.CancelFunc(func() {})
					if c.budget > 0 {
						ctx, cancel = context.WithTimeout(ctx, c.budget)
					}
					_, _ = pipeline.Do(ctx, p, hung)
					cancel()
				}
				// Opened (with WaitWhenOpen, half-open after: a waited
				// probe that its caller's deadline ends is left out).
				assert.NotEqual(t, resilience.StateClosed, b.State(), "%+v", b.Counts())
			})
		})
	}
}
