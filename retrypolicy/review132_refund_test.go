package retrypolicy_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/resiliencekit/resiliencekit/resilience"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

// A retry that was sent, and whose answer the client then refused on its
// side (class rejected: grpc-go's "received message larger than max", the
// server's work thrown away; a nested pipeline whose own gate stopped its
// retries after sending), is given back to the quota as if never made: the
// quota lets through more retries than it allows.
func TestReview132RefundOfSentRetry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := retrypolicy.NewQuota(0, 1, 10*time.Second) // 10 retries a window, 1 a second
		p := retrypolicy.New(retrypolicy.MaxAttempts(2), retrypolicy.BaseDelay(0), retrypolicy.WithQuota(q))
		var sent atomic.Int64
		for range 50 {
			n := 0
			retrypolicy.Do(context.Background(), p, func(context.Context) (int, error) {
				n++
				if n == 1 {
					return 0, errors.New("UNAVAILABLE")
				}
				sent.Add(1) // the retry reached the dependency
				return 0, resilience.Rejected(errors.New("grpc: received message larger than max"))
			})
		}
		if s := sent.Load(); s > 1 {
			t.Fatalf("%d retries sent within one second by a quota that allows 1 a second (10 a window)", s)
		}
	})
}
