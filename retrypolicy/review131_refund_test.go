package retrypolicy_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/resiliencekit/resiliencekit/resilience"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

// A retry that a gate in the operation refuses before it is sent (its
// error of class rejected, as a pipeline's throttle or concurrency
// limit's) was not made: the quota has it back (review131).
func TestReview131QuotaRefundsARetryAGateRefused(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := retrypolicy.NewQuota(0, 1, 10*time.Second) // 10 retries a window, 1 a bucket
		p := retrypolicy.New(retrypolicy.WithQuota(q), retrypolicy.BaseDelay(time.Millisecond))
		before := q.Available()
		n := 0
		_, err := retrypolicy.Do(t.Context(), p, func(context.Context) (int, error) {
			if n++; n == 1 {
				return 0, errors.New("503")
			}
			return 0, resilience.Rejected(errors.New("limit full"))
		})
		require.Error(t, err)
		assert.Equal(t, 2, n)
		assert.Equal(t, before, q.Available(), "the refused retry still holds its charge")
	})
}
