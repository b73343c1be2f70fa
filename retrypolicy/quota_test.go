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
		name        string
		ratio       float64
		floor       float64
		wantRetries int64
	}{
		{"10% with a floor of 5/s over 10 s", 0.1, 5, 100 + 50},
		{"10% without floor", 0.1, 0, 100},
		{"20% with a floor of 1/s", 0.2, 1, 200 + 10},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				quota := retrypolicy.NewQuota(tt.ratio, tt.floor, 10*time.Second)
				p := retrypolicy.New(retrypolicy.WithQuota(quota), retrypolicy.WithSleep(noSleep))
				var calls, exhausted atomic.Int64
				var wg sync.WaitGroup
				for range 1000 {
					wg.Go(func() {
						_, err := retrypolicy.Do(t.Context(), p, failing(&calls, errBlip))
						if assert.Error(t, err) && errors.Is(err, retrypolicy.ErrQuotaExhausted) {
							exhausted.Add(1)
						}
					})
				}
				wg.Wait()
				retries := calls.Load() - 1000
				assert.Equal(t, tt.wantRetries, retries, "retries stop at ratio x calls + floor")
				assert.Greater(t, exhausted.Load(), int64(500))
				assert.Zero(t, quota.Available())
			})
		})
	}
}

func TestQuotaWindowSlides(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		quota := retrypolicy.NewQuota(0, 1, 10*time.Second)
		p := retrypolicy.New(retrypolicy.WithQuota(quota), retrypolicy.WithSleep(noSleep), retrypolicy.MaxAttempts(100))
		var calls atomic.Int64
		_, err := retrypolicy.Do(t.Context(), p, failing(&calls, errBlip))
		require.ErrorIs(t, err, retrypolicy.ErrQuotaExhausted)
		require.ErrorIs(t, err, errBlip)
		assert.EqualValues(t, 11, calls.Load(), "the floor: 1/s over 10 s")

		time.Sleep(5 * time.Second)
		assert.Zero(t, quota.Available(), "retries stay in the window")
		time.Sleep(5 * time.Second)
		assert.Equal(t, 10, quota.Available(), "and leave it")
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
				require.EqualValues(t, 11, calls.Load())
				time.Sleep(later)
				calls.Store(0)
				_, _ = retrypolicy.Do(t.Context(), p, failing(&calls, errBlip))
				if later == 0 {
					assert.EqualValues(t, 1, calls.Load(), "the floor is spent")
				} else {
					assert.EqualValues(t, 11, calls.Load(), "a new window: the floor again, and no more")
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
				want := 0.5 * 10 * float64(perSecond) // half the calls of the last 10 s
				assert.InDelta(t, want, quota.Available(), want/10+1)
			})
		})
	}
}
