package pipeline

import (
	"context"
	"testing"
	"time"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/hedge"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

// review134: a hedged call that wins with its first attempt allocates no
// more than before the commit (measured: see the report), with a breaker
// and retries too.
func TestReview134HedgedSuccessAllocs(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		name string
		p    *Pipeline
		max  float64
	}{
		{"hedge", New(WithHedging(hedge.New(hedge.Delay(time.Hour)))), 0},
		{"hedge+breaker+retry", New(WithHedging(hedge.New(hedge.Delay(time.Hour))), WithBreaker(breaker.New("x")), WithRetry(retrypolicy.New())), 0},
		{"hedge+budget", New(WithHedging(hedge.New(hedge.Delay(time.Hour))), WithTimeBudget(time.Hour)), 1},
	} {
		op := func(context.Context) (int, error) { return 1, nil }
		n := testing.AllocsPerRun(1000, func() {
			if _, err := Do(ctx, c.p, op); err != nil {
				t.Fatal(err)
			}
		})
		t.Logf("%s: %v allocs per call", c.name, n)
		if n > c.max+1 { // +1: the first attempt's context (64 bytes), as race's doc says
			t.Errorf("%s: %v allocs per call", c.name, n)
		}
	}
}
