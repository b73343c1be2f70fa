package pipeline

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/hedge"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

func TestHugeDurations(t *testing.T) {
	huge := time.Duration(math.MaxInt64)
	for name, opts := range map[string][]Option{
		"budget":          {WithTimeBudget(huge)},
		"budget+breaker":  {WithTimeBudget(huge), WithBreaker(breaker.New("x"))},
		"attempt timeout": {WithAttemptTimeout(huge)},
		"both+hedge":      {WithTimeBudget(huge), WithAttemptTimeout(huge), WithRetry(retrypolicy.New()), WithHedging(hedge.New(hedge.Delay(huge)))},
	} {
		p := New(opts...)
		_, err := Do(context.Background(), p, func(ctx context.Context) (int, error) {
			d, ok := ctx.Deadline()
			if !ok || !d.After(time.Now().Add(100*365*24*time.Hour)) {
				t.Errorf("%s: deadline %v %v", name, d, ok)
			}
			select {
			case <-ctx.Done():
				t.Errorf("%s: done at once: %v", name, ctx.Err())
			case <-time.After(time.Millisecond):
			}
			return 1, ctx.Err()
		})
		if err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}
