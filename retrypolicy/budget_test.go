package retrypolicy_test

import (
	"context"
	"errors"
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

func TestBudgetCapsRetriesAcrossCalls(t *testing.T) {
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
				budget := retrypolicy.NewBudget(tt.ratio, tt.floor, 10*time.Second)
				p := retrypolicy.New(retrypolicy.WithBudget(budget), retrypolicy.WithSleep(noSleep))
				var calls, exhausted atomic.Int64
				var wg sync.WaitGroup
				for range 1000 {
					wg.Go(func() {
						_, err := retrypolicy.Do(t.Context(), p, failing(&calls, errBlip))
						if assert.Error(t, err) && errors.Is(err, retrypolicy.ErrBudgetExhausted) {
							exhausted.Add(1)
						}
					})
				}
				wg.Wait()
				retries := calls.Load() - 1000
				assert.Equal(t, tt.wantRetries, retries, "retries stop at ratio x calls + floor")
				assert.Greater(t, exhausted.Load(), int64(500))
				assert.Zero(t, budget.Available())
			})
		})
	}
}

func TestBudgetWindowSlides(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		budget := retrypolicy.NewBudget(0, 1, 10*time.Second)
		p := retrypolicy.New(retrypolicy.WithBudget(budget), retrypolicy.WithSleep(noSleep), retrypolicy.MaxAttempts(100))
		var calls atomic.Int64
		_, err := retrypolicy.Do(t.Context(), p, failing(&calls, errBlip))
		require.ErrorIs(t, err, retrypolicy.ErrBudgetExhausted)
		require.ErrorIs(t, err, errBlip)
		assert.EqualValues(t, 11, calls.Load(), "the floor: 1/s over 10 s")

		time.Sleep(5 * time.Second)
		assert.Zero(t, budget.Available(), "retries stay in the window")
		time.Sleep(5 * time.Second)
		assert.Equal(t, 10, budget.Available(), "and leave it")
	})
}
