package pipeline_test

import (
	"context"
	"errors"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
	"github.com/resiliencekit/resiliencekit/throttle"
)

// review21Reset is a connection reset by peer, as net/http wraps it.
var review21Reset = &netOpError{syscall.ECONNRESET}

type netOpError struct{ err error }

func (e *netOpError) Error() string { return "read tcp 127.0.0.1:1->127.0.0.1:2: " + e.err.Error() }
func (e *netOpError) Unwrap() error { return e.err }

// burstAfterIdle runs n calls at once through p against a healthy
// dependency whose first attempt per call hits a stale connection, and
// returns how many calls failed and how many failed with ErrThrottled.
func burstAfterIdle(t *testing.T, p *pipeline.Pipeline, n int) (failed, throttled int) {
	t.Helper()
	var wg sync.WaitGroup
	var nFailed, nThrottled atomic.Int64
	var first sync.WaitGroup // the stale connections all fail together, as a pool does
	first.Add(n)
	for range n {
		wg.Go(func() {
			attempt := 0
			_, err := pipeline.Do(context.Background(), p, func(ctx context.Context) (int, error) {
				attempt++
				if attempt == 1 {
					first.Done()
					first.Wait()
					return 0, review21Reset
				}
				return 1, nil
			})
			if err != nil {
				nFailed.Add(1)
				if errors.Is(err, throttle.ErrThrottled) {
					nThrottled.Add(1)
				}
			}
		})
	}
	wg.Wait()
	return int(nFailed.Load()), int(nThrottled.Load())
}

// TestReview21ThrottleRefusesTheRetryOfALoneBlip, from a review: one call
// after an idle spell, whose first attempt meets a stale connection; its
// retry would succeed. The throttle has seen one request and no accept in
// its window: it refuses the retry with probability 1/2.
func TestReview21ThrottleRefusesTheRetryOfALoneBlip(t *testing.T) {
	const trials = 200
	retry := retrypolicy.New(retrypolicy.MaxAttempts(3), retrypolicy.BaseDelay(time.Millisecond))
	failed := 0
	for range trials {
		p := pipeline.New(pipeline.WithRetry(retry), pipeline.WithThrottle(throttle.New())) // after an idle window
		attempt := 0
		_, err := pipeline.Do(context.Background(), p, func(ctx context.Context) (int, error) {
			attempt++
			if attempt == 1 {
				return 0, review21Reset
			}
			return 1, nil
		})
		if err != nil {
			require.ErrorIs(t, err, throttle.ErrThrottled)
			failed++
		}
	}
	t.Logf("%d of %d lone calls failed with ErrThrottled; a plain retry loop fails none", failed, trials)
	assert.Zero(t, failed)
}

// TestReview21ThrottleClosedLoopLockout, from a review: the throttle's
// cold-start lockout (see TestReview21OneFailureAtColdStartLocksOutAHealthyDependency
// in package throttle) through a pipeline. 64 workers consume a queue,
// each calling as soon as its last call ended, through a pipeline with a
// throttle (window 1 s; 10 s by default, and the lockout scales with it)
// and a retry. The dependency answers in 2 ms and fails once: its first
// answer, a fast 503. A plain client fails that one call's first attempt
// and retries it; through the pipeline, most calls of the next few
// windows fail with ErrThrottled.
func TestReview21ThrottleClosedLoopLockout(t *testing.T) {
	const workers = 64
	window := time.Second
	th := throttle.New(throttle.Window(window))
	if os.Getenv("REVIEW21_DEFAULT_WINDOW") != "" { // 30 s: the default throttle, 10 s windows
		window, th = 10*time.Second, throttle.New()
	}
	p := pipeline.New(
		pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(3), retrypolicy.BaseDelay(time.Millisecond))),
		pipeline.WithThrottle(th),
	)
	var failedOnce atomic.Bool
	op := func(ctx context.Context) (int, error) {
		if failedOnce.CompareAndSwap(false, true) {
			return 0, errors.New("503")
		}
		select {
		case <-time.After(2 * time.Millisecond):
			return 1, nil
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
	var ok, throttled [3]atomic.Int64
	start := time.Now()
	var ready, wg sync.WaitGroup
	ready.Add(workers)
	for range workers {
		wg.Go(func() {
			ready.Done()
			ready.Wait()
			for {
				i := int(time.Since(start) / window)
				if i >= len(ok) {
					return
				}
				_, err := pipeline.Do(context.Background(), p, op)
				switch {
				case err == nil:
					ok[i].Add(1)
				case errors.Is(err, throttle.ErrThrottled):
					throttled[i].Add(1)
				default:
					t.Errorf("unexpected error: %v", err)
				}
			}
		})
	}
	wg.Wait()
	var bad, all int64
	for i := range ok {
		o, th := ok[i].Load(), throttled[i].Load()
		bad += th
		all += o + th
		t.Logf("window %d: %6d calls ok, %8d failed with ErrThrottled (%.1f%%)", i, o, th, 100*float64(th)/float64(max(o+th, 1)))
	}
	assert.Less(t, float64(bad)/float64(all), 0.01, "calls failed against a dependency that failed once")
}
