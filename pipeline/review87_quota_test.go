package pipeline_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

var review87Err = errors.New("review87: unavailable")

// A quota that allows no retry at all; a call whose first attempt fails
// opens the breaker, waits for it (WaitWhenOpen) and is let through as its
// probe: its second attempt, a retry, is sent uncharged.
func TestReview87_ProbeRetryUncharged(t *testing.T) {
	q := retrypolicy.NewQuota(0, 0, time.Minute)
	b := breaker.New("review87", breaker.ConsecutiveFailures(1), breaker.OpenTimeout(20*time.Millisecond))
	p := pipeline.New(pipeline.WithBreaker(b), pipeline.WaitWhenOpen(),
		pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(3), retrypolicy.BaseDelay(time.Millisecond), retrypolicy.WithQuota(q))))
	var n atomic.Int64
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_, err := pipeline.Do(ctx, p, func(ctx context.Context) (int, error) {
		n.Add(1)
		return 0, review87Err
	})
	t.Logf("attempts %d, quota available %d, err %v", n.Load(), q.Available(), err)
	if n.Load() > 1 {
		t.Errorf("a quota that allows no retry: the call sent %d attempts", n.Load())
	}
}

// Many calls, a dependency that flaps, WaitWhenOpen: retries the
// dependency got (attempts beyond a call's first) against the quota's count.
func TestReview87_QuotaBoundWaitWhenOpen(t *testing.T) {
	q := retrypolicy.NewQuota(0.2, 0, time.Minute)
	b := breaker.New("review87c", breaker.ConsecutiveFailures(5), breaker.OpenTimeout(5*time.Millisecond))
	p := pipeline.New(pipeline.WithBreaker(b), pipeline.WaitWhenOpen(),
		pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(4), retrypolicy.BaseDelay(time.Millisecond), retrypolicy.MaxDelay(3*time.Millisecond), retrypolicy.WithQuota(q))))
	var failing atomic.Bool
	stop := make(chan struct{})
	go func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(7 * time.Millisecond):
				failing.Store(!failing.Load())
			}
		}
	}()
	var calls, retries atomic.Int64
	var wg sync.WaitGroup
	deadline := time.Now().Add(3 * time.Second)
	for g := 0; g < 64; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(deadline) {
				var sent int64
				ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
				calls.Add(1)
				pipeline.Do(ctx, p, func(ctx context.Context) (int, error) {
					sent++
					if failing.Load() {
						return 0, review87Err
					}
					return 1, nil
				})
				cancel()
				if sent > 1 {
					retries.Add(sent - 1)
				}
			}
		}()
	}
	wg.Wait()
	close(stop)
	bound := 0.2 * float64(calls.Load())
	t.Logf("calls %d, retries sent %d, bound %.0f, quota available %d", calls.Load(), retries.Load(), bound, q.Available())
	if float64(retries.Load()) > bound {
		t.Errorf("retries %d over the bound %.0f", retries.Load(), bound)
	}
}

var review87CallTimeout = 200 * time.Millisecond

// Without WaitWhenOpen (no probe sends a stopped call's retry), the quota
// charges exactly the retries sent, under a flapping breaker.
func TestReview87_ChargedEqualsSentNoWait(t *testing.T) { review87Charged(t, false) }

func review87Charged(t *testing.T, wait bool) {
	q := retrypolicy.NewQuota(0, 100, 10*time.Minute) // 60,000 a window, 6,000 a bucket
	allowance := q.Available()
	b := breaker.New("review87d", breaker.ConsecutiveFailures(5), breaker.OpenTimeout(5*time.Millisecond))
	opts := []pipeline.Option{pipeline.WithBreaker(b),
		pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(4), retrypolicy.BaseDelay(time.Millisecond), retrypolicy.MaxDelay(3*time.Millisecond), retrypolicy.WithQuota(q)))}
	if wait {
		opts = append(opts, pipeline.WaitWhenOpen())
	}
	p := pipeline.New(opts...)
	var failing atomic.Bool
	stop := make(chan struct{})
	go func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(7 * time.Millisecond):
				failing.Store(!failing.Load())
			}
		}
	}()
	var calls, retries atomic.Int64
	var wg sync.WaitGroup
	end := time.Now().Add(2 * time.Second)
	for g := 0; g < 64; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(end) {
				var sent int64
				ctx, cancel := context.WithTimeout(context.Background(), review87CallTimeout)
				calls.Add(1)
				pipeline.Do(ctx, p, func(ctx context.Context) (int, error) {
					sent++
					if failing.Load() {
						return 0, review87Err
					}
					return 1, nil
				})
				cancel()
				if sent > 1 {
					retries.Add(sent - 1)
				}
			}
		}()
	}
	wg.Wait()
	close(stop)
	charged := allowance - q.Available()
	t.Logf("calls %d, retries sent %d, charged %d", calls.Load(), retries.Load(), charged)
	if allowance != 6000 {
		t.Fatalf("allowance %d", allowance)
	}
	if int64(charged) != retries.Load() {
		t.Errorf("%d retries sent, %d charged", retries.Load(), charged)
	}
}
