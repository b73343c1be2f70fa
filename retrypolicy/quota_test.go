package retrypolicy_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

func noSleep(context.Context, time.Duration) error { return nil }

func TestQuotaCapsRetriesAcrossCalls(t *testing.T) {
	tests := []struct {
		name  string
		ratio float64
		floor float64
	}{
		{"10% with a floor of 5/s over 10 s", 0.1, 5},
		{"10% without floor", 0.1, 0},
		{"20% with a floor of 1/s", 0.2, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				quota := retrypolicy.NewQuota(tt.ratio, tt.floor, 10*time.Second)
				p := retrypolicy.New(retrypolicy.WithQuota(quota), retrypolicy.WithSleep(noSleep), retrypolicy.MaxAttempts(100))
				var attempts, exhausted atomic.Int64
				total := int64(0)
				// 100 failing calls at once in each 1 s bucket of the window.
				for round := range 10 {
					before := attempts.Load()
					var wg sync.WaitGroup
					for range 100 {
						wg.Go(func() {
							_, err := retrypolicy.Do(t.Context(), p, failing(&attempts, errBlip))
							if assert.Error(t, err) && errors.Is(err, retrypolicy.ErrQuotaExhausted) {
								exhausted.Add(1)
							}
						})
					}
					wg.Wait()
					retries := attempts.Load() - before - 100
					total += retries
					inWindow := tt.ratio*float64(100*(round+1)) + tt.floor*10
					assert.LessOrEqual(t, float64(retries), max(math.Floor(inWindow/10), 1), "round %d: a tenth of the allowance a bucket", round)
					assert.Positive(t, retries, "round %d", round)
					time.Sleep(time.Second)
				}
				assert.LessOrEqual(t, float64(total), tt.ratio*1000+tt.floor*10, "retries stay within ratio x calls + floor")
				assert.Greater(t, exhausted.Load(), int64(500))
			})
		})
	}
}

// TestQuotaStartsAnOutageWithNoBurst: after a quiet second of successes,
// every call fails: no tenth of the window sees more than a tenth of the
// allowance, however many calls want a retry.
func TestQuotaStartsAnOutageWithNoBurst(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		quota := retrypolicy.NewQuota(0.1, 10, time.Second)
		p := retrypolicy.New(retrypolicy.WithQuota(quota), retrypolicy.WithSleep(noSleep), retrypolicy.MaxAttempts(8))
		var attempts atomic.Int64
		for range 100 { // 1000 calls a second for a second, all fine
			for range 10 {
				_, _ = retrypolicy.Do(t.Context(), p, func(context.Context) (int, error) { return 1, nil })
			}
			time.Sleep(10 * time.Millisecond)
		}
		// Allowance: 10% of 1000 calls + 10 = 110 over the window; 11 a bucket.
		for bucket := range 10 {
			before := attempts.Load()
			var wg sync.WaitGroup
			for range 100 {
				wg.Go(func() { _, _ = retrypolicy.Do(t.Context(), p, failing(&attempts, errBlip)) })
			}
			wg.Wait()
			retries := attempts.Load() - before - 100
			assert.LessOrEqual(t, retries, int64(11), "bucket %d", bucket)
			time.Sleep(100 * time.Millisecond)
		}
	})
}

// TestQuotaFloorIsARate: with no calls to earn retries, the floor allows
// one retry a second, every second, and never a burst.
func TestQuotaFloorIsARate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		quota := retrypolicy.NewQuota(0, 1, 10*time.Second)
		p := retrypolicy.New(retrypolicy.WithQuota(quota), retrypolicy.WithSleep(noSleep), retrypolicy.MaxAttempts(100))
		for second := range 30 {
			var attempts atomic.Int64
			_, err := retrypolicy.Do(t.Context(), p, failing(&attempts, errBlip))
			require.ErrorIs(t, err, retrypolicy.ErrQuotaExhausted)
			require.ErrorIs(t, err, errBlip)
			assert.EqualValues(t, 2, attempts.Load(), "second %d: one retry", second)
			assert.Zero(t, quota.Available(), "second %d", second)
			time.Sleep(time.Second)
		}
	})
}

func TestZeroQuotaSetsNoLimit(t *testing.T) {
	var q retrypolicy.Quota
	p := retrypolicy.New(retrypolicy.WithQuota(&q), retrypolicy.WithSleep(noSleep), retrypolicy.MaxAttempts(50))
	var calls atomic.Int64
	_, err := retrypolicy.Do(t.Context(), p, failing(&calls, errBlip))
	require.ErrorIs(t, err, retrypolicy.ErrMaxAttempts)
	assert.EqualValues(t, 50, calls.Load())
}

func TestNewQuotaRejectsNonsense(t *testing.T) {
	for _, v := range []float64{math.NaN(), math.Inf(1), -0.1} {
		assert.PanicsWithValue(t, fmt.Sprintf("retrypolicy: NewQuota ratio %v is not a finite number >= 0", v),
			func() { retrypolicy.NewQuota(v, 1, time.Second) })
		assert.PanicsWithValue(t, fmt.Sprintf("retrypolicy: NewQuota floorPerSecond %v is not a finite number >= 0", v),
			func() { retrypolicy.NewQuota(0.1, v, time.Second) })
	}
}

// TestQuotaHoldsAtAnyUptime: the slots' bucket tags wrap around after 2^32
// buckets; a slot left that long must count as old, not as current.
func TestQuotaHoldsAtAnyUptime(t *testing.T) {
	for _, later := range []time.Duration{0, (1<<23 + 5) * time.Second, (1<<31 + 5) * time.Second} {
		t.Run(later.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				quota := retrypolicy.NewQuota(0, 1, 10*time.Second)
				p := retrypolicy.New(retrypolicy.WithQuota(quota), retrypolicy.WithSleep(noSleep), retrypolicy.MaxAttempts(1000))
				var calls atomic.Int64
				_, _ = retrypolicy.Do(t.Context(), p, failing(&calls, errBlip))
				require.EqualValues(t, 2, calls.Load())
				time.Sleep(later)
				calls.Store(0)
				_, _ = retrypolicy.Do(t.Context(), p, failing(&calls, errBlip))
				if later == 0 {
					assert.EqualValues(t, 1, calls.Load(), "the bucket's retry is spent")
				} else {
					assert.EqualValues(t, 2, calls.Load(), "a new bucket: a retry again, and no more")
				}
			})
		})
	}
}

// TestQuotaCountsRareCalls: calls a second apart all count.
func TestQuotaCountsRareCalls(t *testing.T) {
	for _, perSecond := range []int{1, 5, 20} {
		t.Run(fmt.Sprint(perSecond, "/s"), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				quota := retrypolicy.NewQuota(0.5, 0, 10*time.Second)
				p := retrypolicy.New(retrypolicy.WithQuota(quota))
				for range 30 * perSecond {
					_, _ = retrypolicy.Do(t.Context(), p, func(context.Context) (int, error) { return 1, nil })
					time.Sleep(time.Second / time.Duration(perSecond))
				}
				// Half the calls of the last 10 s, a tenth of it a bucket.
				want := max(math.Floor(0.5*float64(perSecond)), 1)
				assert.InDelta(t, want, quota.Available(), want/10+1)
			})
		})
	}
}

// TestQuotaWindowCapsBelowItsBuckets: the window's allowance binds even
// where each tenth of it would allow one: 3% of 100 calls is 3 retries in
// the window, not one a bucket.
func TestQuotaWindowCapsBelowItsBuckets(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := retrypolicy.NewQuota(0.03, 0, 10*time.Second)
		p := retrypolicy.New(retrypolicy.WithQuota(q))
		for range 100 { // 100 calls that succeed: they count, they take nothing
			_, _ = retrypolicy.Do(t.Context(), p, func(context.Context) (int, error) { return 1, nil })
		}
		taken := 0
		for range 9 { // one try a bucket, within the window
			if q.Take() {
				taken++
			}
			time.Sleep(time.Second)
		}
		assert.Equal(t, 3, taken)
	})
}

func TestQuotaWindowAtItsBounds(t *testing.T) {
	assert.NotPanics(t, func() { retrypolicy.NewQuota(0.1, 0, 10*time.Millisecond) })
	assert.NotPanics(t, func() { retrypolicy.NewQuota(0, 0, 0) }, "0: the default window")
	assert.Panics(t, func() { retrypolicy.NewQuota(0.1, 0, 9*time.Millisecond) })
	assert.Panics(t, func() { retrypolicy.NewQuota(0.1, 0, -time.Second) })
}

// TestACallFundsItsRetryAfterABusySpellAndALull: after a busy spell the
// quota reads the clock once in up to 64 calls, so the first calls after
// a lull are counted in the last bucket read, which has left the window;
// a call that then retries is counted again, now, and funds its retry,
// as a plain client retries it (ratio 1: a retry per call; no floor).
func TestACallFundsItsRetryAfterABusySpellAndALull(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := retrypolicy.NewQuota(1, 0, time.Second)
		p := retrypolicy.New(retrypolicy.WithQuota(q), retrypolicy.BaseDelay(time.Millisecond))
		for range 2000 { // busy: 2,000 calls in 100 ms
			_, _ = retrypolicy.Do(context.Background(), p, func(context.Context) (int, error) { return 1, nil })
			time.Sleep(50 * time.Microsecond)
		}
		time.Sleep(5 * time.Second) // a lull of five windows
		for i := range 3 {
			failed := false
			_, err := retrypolicy.Do(context.Background(), p, func(context.Context) (int, error) {
				if !failed {
					failed = true
					return 0, errors.New("blip")
				}
				return 1, nil
			})
			assert.NoError(t, err, "call %d after the lull", i)
			time.Sleep(150 * time.Millisecond) // a bucket apart: the quota paces retries a bucket at a time
		}
	})
}
