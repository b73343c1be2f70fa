package retrypolicy_test

import (
	"context"
	"errors"
	"math"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

// TestQuotaWindowZeroIsTenSeconds: a window of 0 is the default of 10 s:
// a floor of 1 retry a second allows 10 in the window, one a second, the
// same retries at the same moments as a quota given 10 s.
func TestQuotaWindowZeroIsTenSeconds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		def := retrypolicy.NewQuota(0, 1, 0)
		ten := retrypolicy.NewQuota(0, 1, 10*time.Second)
		assert.Equal(t, 1, def.Available(), "one in the first second")
		var taken, tenTaken []time.Duration
		start := time.Now()
		for range 250 { // a try every 100 ms for 25 s
			if def.Take() {
				taken = append(taken, time.Since(start))
			}
			if ten.Take() {
				tenTaken = append(tenTaken, time.Since(start))
			}
			time.Sleep(100 * time.Millisecond)
		}
		assert.Len(t, taken, 25, "one a second")
		assert.Equal(t, tenTaken, taken)
	})
}

// TestWithIsACopyWithOptionsOnTop: With applies its options, nil ones
// skipped, on top of the policy's own, and leaves the policy as it was; on
// a nil policy, on top of the defaults.
func TestWithIsACopyWithOptionsOnTop(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		base := retrypolicy.New(retrypolicy.MaxAttempts(5), retrypolicy.BaseDelay(time.Second), retrypolicy.Jitter(retrypolicy.None))
		derived := base.With(retrypolicy.MaxAttempts(2), nil)
		calls := func(p *retrypolicy.Policy) (n int, waited time.Duration) {
			start := time.Now()
			_, _ = retrypolicy.Do(t.Context(), p, func(context.Context) (int, error) { n++; return 0, errBlip })
			return n, time.Since(start)
		}
		n, waited := calls(derived)
		assert.Equal(t, 2, n, "the option given to With")
		assert.Equal(t, time.Second, waited, "the policy's own delays")
		n, waited = calls(base)
		assert.Equal(t, 5, n, "the policy unchanged")
		assert.Equal(t, 15*time.Second, waited)

		var none *retrypolicy.Policy
		fromNil := none.With(retrypolicy.MaxAttempts(1))
		assert.Equal(t, 1, fromNil.MaxAttempts())
		assert.Equal(t, 10*time.Second, fromNil.MaxDelay(), "the default")
	})
}

// TestASleepThatFailsStopsTheLoopWithItsError: a sleep function that fails
// while the caller's context lasts stops the loop after the attempt, with
// its error as the reason, the last attempt's error kept too; one that
// returns as the context ends gives the context's reason.
func TestASleepThatFailsStopsTheLoopWithItsError(t *testing.T) {
	errClock := errors.New("clock stopped")
	var calls atomic.Int64
	p := retrypolicy.New(retrypolicy.WithSleep(func(context.Context, time.Duration) error { return errClock }))
	_, err := retrypolicy.Do(t.Context(), p, failing(&calls, errBlip))
	var re *retrypolicy.Error
	require.ErrorAs(t, err, &re)
	assert.Equal(t, errClock, re.Reason)
	assert.Equal(t, 1, re.Attempts)
	assert.ErrorIs(t, err, errBlip)
	assert.EqualValues(t, 1, calls.Load())

	ctx, cancel := context.WithCancel(t.Context())
	p = retrypolicy.New(retrypolicy.WithSleep(func(ctx context.Context, _ time.Duration) error { cancel(); return ctx.Err() }))
	_, err = retrypolicy.Do(ctx, p, failing(&calls, errBlip))
	require.ErrorAs(t, err, &re)
	assert.Equal(t, context.Canceled, re.Reason)
}

// TestACallerGoneBeforeAZeroDelayGetsNoMoreAttempts: a caller whose
// context ends as a retry is scheduled (here its listener gives up on the
// first retry) gets no further attempt, even with no delay between
// attempts: the loop stops with the caller's reason after one attempt.
// Run many times, since a wait of zero must not race the context.
func TestACallerGoneBeforeAZeroDelayGetsNoMoreAttempts(t *testing.T) {
	for range 200 {
		ctx, cancel := context.WithCancel(t.Context())
		p := retrypolicy.New(retrypolicy.BaseDelay(0), retrypolicy.WithListener(onRetry(func(int, error, time.Duration) { cancel() })))
		var calls atomic.Int64
		_, err := retrypolicy.Do(ctx, p, failing(&calls, errBlip))
		var re *retrypolicy.Error
		require.ErrorAs(t, err, &re)
		require.EqualValues(t, 1, calls.Load(), "one attempt")
		require.Equal(t, context.Canceled, re.Reason)
	}
}

// TestQuotaAvailableWithAHugeFloor: a floor beyond any count (accepted, as
// finite) reports as many retries as an int holds, not the wrapped
// conversion of a float64 too large for one (0, which the registry and
// the dashboard show as a quota spent).
func TestQuotaAvailableWithAHugeFloor(t *testing.T) {
	for _, floor := range []float64{1e300, math.MaxFloat64} {
		q := retrypolicy.NewQuota(0, floor, time.Second)
		require.True(t, q.Take())
		require.Equal(t, math.MaxInt, q.Available(), "floor %g", floor)
	}
}
