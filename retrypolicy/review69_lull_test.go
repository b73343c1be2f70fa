package retrypolicy_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/resiliencekit/resiliencekit/resilience"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

var errReview69 = errors.New("review69 transient")
var _ = resilience.Classify

// busy then lull: a service that made thousands of calls a second, then
// none for more than a window, then a few calls each failing once. With
// ratio 1 the quota should fund each call's own retry as it does for a
// service that was always quiet (the changelog's promise).
func review69LullRun(t *testing.T, lull time.Duration, calls int, concurrent bool) (made, refused int64) {
	q := retrypolicy.NewQuota(1, 0, time.Second)
	p := retrypolicy.New(retrypolicy.MaxAttempts(2), retrypolicy.BaseDelay(time.Millisecond), retrypolicy.WithQuota(q))
	ok := func(context.Context) (int, error) { return 1, nil }
	// busy: 2,000 calls per 100 ms bucket, for 1.5 s
	for range 15 {
		for range 2000 {
			_, _ = retrypolicy.Do(context.Background(), p, ok)
		}
		time.Sleep(100 * time.Millisecond)
	}
	// a few more busy calls, not reaching the next reading
	for range 37 {
		_, _ = retrypolicy.Do(context.Background(), p, ok)
	}
	time.Sleep(lull)
	var mk, rf atomic.Int64
	one := func() {
		var n atomic.Int32
		_, err := retrypolicy.Do(context.Background(), p, func(context.Context) (int, error) {
			if n.Add(1) == 1 {
				return 0, errReview69
			}
			return 1, nil
		})
		if n.Load() == 2 {
			mk.Add(1)
		}
		if errors.Is(err, retrypolicy.ErrQuotaExhausted) {
			rf.Add(1)
		}
	}
	if concurrent {
		var wg sync.WaitGroup
		start := make(chan struct{})
		for range calls {
			wg.Go(func() { <-start; one() })
		}
		close(start)
		wg.Wait()
	} else {
		for range calls {
			one()
			time.Sleep(300 * time.Millisecond)
		}
	}
	return mk.Load(), rf.Load()
}

func TestReview69QuotaBusyThenLullSequential(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		made, refused := review69LullRun(t, 3*time.Second, 5, false)
		t.Logf("sequential after busy+lull: %d retries made, %d refused of 5", made, refused)
		if refused > 0 {
			t.Errorf("%d of 5 calls after a busy period and a lull were refused their retry (ratio 1): a plain client makes it", refused)
		}
	})
}

func TestReview69QuotaBusyThenLullConcurrent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		made, refused := review69LullRun(t, 3*time.Second, 20, true)
		t.Logf("20 concurrent after busy+lull: %d retries made, %d refused", made, refused)
		// Without staleness: 20 calls in the window, ratio 1: 20 in the window, 2 per bucket.
		if made < 2 {
			t.Errorf("20 concurrent calls after a busy period and a lull: %d got its retry (ratio 1; a quiet service's 20 get 2, TestReview69QuotaQuietConcurrentControl)", made)
		}
	})
}

// Control: a quiet service (no busy period) under the same burst.
func TestReview69QuotaQuietConcurrentControl(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := retrypolicy.NewQuota(1, 0, time.Second)
		p := retrypolicy.New(retrypolicy.MaxAttempts(2), retrypolicy.BaseDelay(time.Millisecond), retrypolicy.WithQuota(q))
		time.Sleep(3 * time.Second)
		var mk atomic.Int64
		var wg sync.WaitGroup
		start := make(chan struct{})
		for range 20 {
			wg.Go(func() {
				<-start
				var n atomic.Int32
				_, _ = retrypolicy.Do(context.Background(), p, func(context.Context) (int, error) {
					if n.Add(1) == 1 {
						return 0, errReview69
					}
					return 1, nil
				})
				if n.Load() == 2 {
					mk.Add(1)
				}
			})
		}
		close(start)
		wg.Wait()
		t.Logf("quiet control: %d of 20 retries made", mk.Load())
	})
}
