package pipeline_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/resiliencekit/resiliencekit/limit"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
	"github.com/resiliencekit/resiliencekit/throttle"
)

// A dependency that serves `capacity` attempts at once in 10 ms and slows
// past it (latency grows with the excess); the pipeline's attempt timeout
// turns that into failures. The AIMD limit must fall near the capacity,
// and rise again once the capacity is back, within a couple of seconds.
func TestReview150AIMDFallsUnderOverloadAndRecovers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := limit.NewAIMD(limit.Initial(100), limit.Max(400))
		th := throttle.New(throttle.Window(time.Second))
		p := pipeline.New(pipeline.WithTimeBudget(200*time.Millisecond), pipeline.WithAttemptTimeout(50*time.Millisecond),
			pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(2))), pipeline.WithThrottle(th), pipeline.WithLimit(l))
		var capacity, inService atomic.Int64
		capacity.Store(20)
		var sent, okCalls atomic.Int64
		op := func(ctx context.Context) (int, error) {
			sent.Add(1)
			n := inService.Add(1)
			defer inService.Add(-1)
			d := 10 * time.Millisecond
			if c := capacity.Load(); n > c {
				d = time.Duration(float64(d) * float64(n) / float64(c) * float64(n) / float64(c))
			}
			select {
			case <-time.After(d):
				return 1, nil
			case <-ctx.Done():
				return 0, ctx.Err()
			}
		}
		stop := make(chan struct{})
		var wg sync.WaitGroup
		for range 150 {
			wg.Go(func() {
				for {
					select {
					case <-stop:
						return
					default:
					}
					_, err := pipeline.Do(context.Background(), p, op)
					if err == nil {
						okCalls.Add(1)
					} else if errors.Is(err, limit.ErrLimited) || errors.Is(err, throttle.ErrThrottled) {
						time.Sleep(5 * time.Millisecond) // a refused caller backs off a little
					}
				}
			})
		}
		var maxInOverload int
		for i := range 30 { // 3 s overloaded
			time.Sleep(100 * time.Millisecond)
			if i >= 10 {
				maxInOverload = max(maxInOverload, l.Limit())
			}
		}
		okOver := okCalls.Load()
		t.Logf("overloaded (capacity 20): limit at most %d over the last 2 s, %d calls ok in 3 s (capacity: about 6000)", maxInOverload, okOver)
		if maxInOverload > 60 {
			t.Errorf("limit %d with a capacity of 20: did not fall", maxInOverload)
		}
		capacity.Store(400)
		start := time.Now()
		var back time.Duration
		for time.Since(start) < 5*time.Second {
			time.Sleep(50 * time.Millisecond)
			if l.Limit() >= 100 && back == 0 {
				back = time.Since(start)
			}
		}
		t.Logf("healthy again: limit reached 100 after %v; now %d, throttle p %v", back, l.Limit(), th.RejectProbability())
		if back == 0 || back > 3*time.Second {
			t.Errorf("limit did not recover to 100 within 3 s: %v (now %d)", back, l.Limit())
		}
		close(stop)
		wg.Wait()
	})
}

// Bursts: a healthy dependency of unbounded capacity answering in 10 ms,
// bursts of 200 concurrent calls after lulls, through the default
// adaptive limit (no queue). A plain client completes every call; a limit
// refuses what a burst brings beyond it, so the docs tell such a service
// to give it a queue or an Initial that covers its bursts (with a queue,
// TestReview150BurstsAfterLullsAllComplete: none refused). What the limit
// owes: it doubles with each burst that fills it (slow start), so the
// refusals end after a few bursts. Before review150 it grew by about a
// third a burst (20, 27, 37, 50, 67, 90: 909 of 1,200 refused).
func TestReview150DefaultAIMDBurstsRefusedByHealthyDependency(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := limit.NewAIMD()
		p := pipeline.New(pipeline.WithLimit(l), pipeline.WithRetry(retrypolicy.New()))
		total := 0
		for round := range 6 {
			var refused atomic.Int64
			var wg sync.WaitGroup
			before := l.Limit()
			for range 200 {
				wg.Go(func() {
					_, err := pipeline.Do(context.Background(), p, func(ctx context.Context) (int, error) {
						time.Sleep(10 * time.Millisecond)
						return 1, nil
					})
					if errors.Is(err, limit.ErrLimited) {
						refused.Add(1)
					}
				})
			}
			wg.Wait()
			t.Logf("burst %d: limit %d before, %d of 200 refused", round, before, refused.Load())
			if want := min(200, 20<<round); before < want {
				t.Errorf("burst %d: limit %d, want %d at least: it doubles with each burst that fills it", round, before, want)
			}
			total += int(refused.Load())
			time.Sleep(time.Hour)
		}
		if total > 500 {
			t.Errorf("%d of 1200 calls to a healthy dependency refused by the limit, want 500 at most (180, 160, 120, 40, 0, 0)", total)
		}
	})
}

// Real time: 200 calls queued at a full limit with a 30 ms budget all
// return near their budget, none long after.
func TestReview150RealTimeQueueBoundedByBudget(t *testing.T) {
	l := limit.NewAIMD(limit.Initial(2), limit.MaxWaiting(1000), limit.OldestOnTime())
	p := pipeline.New(pipeline.WithTimeBudget(30*time.Millisecond), pipeline.WithLimit(l), pipeline.WithRetry(retrypolicy.New()))
	release := make(chan struct{})
	var holders sync.WaitGroup
	for range 2 { // two calls hold the slots past every budget... within their own
		holders.Go(func() {
			pipeline.Do(context.Background(), p, func(ctx context.Context) (int, error) {
				<-release
				return 1, nil
			})
		})
	}
	time.Sleep(5 * time.Millisecond)
	var worst atomic.Int64
	var wg sync.WaitGroup
	for range 200 {
		wg.Go(func() {
			start := time.Now()
			pipeline.Do(context.Background(), p, func(ctx context.Context) (int, error) { return 1, nil })
			if d := int64(time.Since(start)); d > worst.Load() {
				worst.Store(d)
			}
		})
	}
	wg.Wait()
	close(release)
	holders.Wait()
	t.Logf("worst wait %v with a 30 ms budget", time.Duration(worst.Load()))
	if time.Duration(worst.Load()) > 80*time.Millisecond {
		t.Errorf("a queued call waited %v with a 30 ms budget", time.Duration(worst.Load()))
	}
	if l.InFlight() != 0 || l.Waiting() != 0 {
		t.Errorf("in flight %d waiting %d", l.InFlight(), l.Waiting())
	}
}
