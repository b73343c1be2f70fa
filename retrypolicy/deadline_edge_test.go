package retrypolicy_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

// Catches `!now.Add(delay).Before(deadline)` as `now.Add(delay).After(deadline)`:
// a delay that ends exactly at the deadline is not slept (no attempt could follow).
func TestDelayEndingExactlyAtTheDeadlineIsNotSlept(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
		defer cancel()
		calls := 0
		p := retrypolicy.New(retrypolicy.Jitter(retrypolicy.None), retrypolicy.BaseDelay(100*time.Millisecond), retrypolicy.MaxAttempts(0))
		_, err := retrypolicy.Do(ctx, p, func(context.Context) (int, error) {
			calls++
			return 0, errors.New("blip")
		})
		if !errors.Is(err, retrypolicy.ErrOutOfTime) {
			t.Fatalf("err = %v, want ErrOutOfTime", err)
		}
		if calls != 1 || time.Since(start) != 0 {
			t.Fatalf("calls %d after %v: the delay to the deadline was slept", calls, time.Since(start))
		}
	})
}
