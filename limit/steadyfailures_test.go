package limit_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/resiliencekit/resiliencekit/limit"
)

// TestAIMDUnderSteadyFailures holds the package doc's figures: against a
// dependency of unlimited capacity (10 ms an attempt, whatever the load)
// that fails 1 attempt in n at random, 100 callers in a closed loop, the
// default adaptive limit settles near 30 for n = 100 and near 100 for
// n = 1000, far below what the dependency serves, as loss-based AIMD does.
func TestAIMDUnderSteadyFailures(t *testing.T) {
	for _, tc := range []struct {
		every    int64
		min, max int
	}{
		{100, 20, 45},
		{1000, 70, 140},
	} {
		synctest.Test(t, func(t *testing.T) {
			l := limit.NewAIMD()
			var n atomic.Int64
			stop := time.Now().Add(30 * time.Second)
			var wg sync.WaitGroup
			for range 100 {
				wg.Go(func() {
					for time.Now().Before(stop) {
						tk, err := l.Acquire(context.Background())
						time.Sleep(10 * time.Millisecond)
						if err == nil {
							var res error
							if n.Add(1)%tc.every == 0 {
								res = errors.New("connection reset")
							}
							l.Release(tk, res)
						}
					}
				})
			}
			wg.Wait()
			t.Logf("1 attempt in %d failing: limit %d", tc.every, l.Limit())
			assert.GreaterOrEqual(t, l.Limit(), tc.min)
			assert.LessOrEqual(t, l.Limit(), tc.max)
		})
	}
}
