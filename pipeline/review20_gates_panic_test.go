package pipeline_test

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/resiliencekit/resiliencekit/limit"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/throttle"
)

// TestReview20CallersPanicsTeachTheGatesNothing, from a review: an
// operation that panicked or called runtime.Goexit was told to the
// throttle and the adaptive limit as the dependency's failure. After 200
// panics the throttle refused 99 of 100 calls to a healthy dependency
// (for 16 to 31 s), and 40 took an adaptive limit from 50 to 1.
func TestReview20CallersPanicsTeachTheGatesNothing(t *testing.T) {
	for _, how := range []string{"panic", "Goexit"} {
		t.Run(how, func(t *testing.T) {
			th := throttle.New()
			l := limit.NewAIMD(limit.Initial(50))
			p := pipeline.New(pipeline.WithThrottle(th), pipeline.WithLimit(l))
			for range 200 {
				var wg sync.WaitGroup
				wg.Go(func() {
					defer func() { _ = recover() }()
					_, _ = pipeline.Do(context.Background(), p, func(context.Context) (int, error) {
						if how == "Goexit" {
							runtime.Goexit()
						}
						panic("the caller's bug")
					})
				})
				wg.Wait()
			}
			require.Zero(t, th.RejectProbability())
			require.Equal(t, 50, l.Limit())
			require.Zero(t, l.InFlight())
			for range 100 {
				_, err := pipeline.Do(context.Background(), p, func(context.Context) (int, error) { return 1, nil })
				require.False(t, errors.Is(err, throttle.ErrThrottled), "%v", err)
				require.NoError(t, err)
			}
		})
	}
}
