package retrypolicy_test

import (
	"context"
	"errors"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/resiliencekit/resiliencekit/resilience"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

// TestReview21DelaysStayWithinBounds, from a review: every delay is in
// [0, MaxDelay] for extreme bases and caps, in every jitter mode.
func TestReview21DelaysStayWithinBounds(t *testing.T) {
	durs := []time.Duration{0, 1, time.Millisecond, math.MaxInt64 / 3, math.MaxInt64/2 + 1, math.MaxInt64 - 1, math.MaxInt64}
	for _, mode := range []retrypolicy.JitterMode{retrypolicy.Full, retrypolicy.Equal, retrypolicy.Decorrelated, retrypolicy.None} {
		for _, base := range durs {
			for _, maxD := range durs[1:] {
				p := retrypolicy.New(retrypolicy.Jitter(mode), retrypolicy.BaseDelay(base), retrypolicy.MaxDelay(maxD))
				n := 0
				for d := range p.Delays() {
					require.GreaterOrEqual(t, d, time.Duration(0), "%v base %v max %v: delay %d", mode, base, maxD, n)
					require.LessOrEqual(t, d, maxD, "%v base %v max %v: delay %d", mode, base, maxD, n)
					if n++; n == 80 {
						break
					}
				}
			}
		}
	}
}

// TestReview21HugeHintWithinBudget: a retry-after hint of MaxInt64 with a
// deadline: the call gives up at once rather than sleeping past it.
func TestReview21HugeHintWithinBudget(t *testing.T) {
	p := retrypolicy.New(retrypolicy.MaxDelay(math.MaxInt64), retrypolicy.MaxAttempts(0))
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := retrypolicy.Do(ctx, p, func(context.Context) (int, error) {
		return 0, resilience.RetryAfter(errors.New("429"), math.MaxInt64)
	})
	assert.ErrorIs(t, err, retrypolicy.ErrOutOfTime)
	assert.Less(t, time.Since(start), 100*time.Millisecond)
}

// TestReview21QuotaExtremes: quotas with extreme ratios and floors never
// panic, never report a negative availability, and a huge one never
// refuses.
func TestReview21QuotaExtremes(t *testing.T) {
	for _, c := range []struct {
		ratio, floor float64
		window       time.Duration
	}{
		{math.MaxFloat64, 0, 0},
		{0, math.MaxFloat64, 0},
		{math.MaxFloat64, math.MaxFloat64, math.MaxInt64},
		{1e-300, 1e-300, 10 * time.Millisecond},
		{0, 0, math.MaxInt64},
	} {
		q := retrypolicy.NewQuota(c.ratio, c.floor, c.window)
		p := retrypolicy.New(retrypolicy.WithQuota(q), retrypolicy.BaseDelay(0), retrypolicy.MaxAttempts(3))
		var wg sync.WaitGroup
		for range 8 {
			wg.Go(func() {
				for range 200 {
					_, _ = retrypolicy.Do(context.Background(), p, func(context.Context) (int, error) { return 0, errors.New("503") })
					assert.GreaterOrEqual(t, q.Available(), 0)
				}
			})
		}
		wg.Wait()
		if c.ratio == math.MaxFloat64 || c.floor == math.MaxFloat64 {
			assert.True(t, q.Take(), "%+v", c)
		}
	}
}
