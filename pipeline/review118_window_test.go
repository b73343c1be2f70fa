package pipeline_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/pipeline"
)

// A hung dependency behind a pipeline with an attempt timeout of 600 ms and
// a breaker counting over Window(1s, 1), two callers: each call fails
// (the attempt timeout: the pipeline's own limit, documented to count),
// yet the breaker never opened: every other pair of timeouts straddled the
// window's renewal and was dropped.
func TestReview118HungDependencyOneBucketBreakerOpens(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := breaker.New("hung", breaker.ConsecutiveFailures(3), breaker.Window(time.Second, 1))
		p := pipeline.New(pipeline.WithBreaker(b), pipeline.WithAttemptTimeout(600*time.Millisecond))
		var failed, refused atomic.Int64
		var wg sync.WaitGroup
		for range 2 {
			wg.Go(func() {
				for end := time.Now().Add(time.Minute); time.Now().Before(end) && refused.Load() == 0; {
					_, err := pipeline.Do(context.Background(), p, func(ctx context.Context) (int, error) {
						<-ctx.Done()
						return 0, ctx.Err()
					})
					switch {
					case breaker.IsRejection(err):
						refused.Add(1)
					case !errors.Is(err, pipeline.ErrAttemptTimeout):
						t.Errorf("unexpected %v", err)
						return
					default:
						failed.Add(1)
					}
				}
			})
		}
		wg.Wait()
		if refused.Load() == 0 {
			t.Fatalf("%d calls timed out in a row over a minute and the breaker (ConsecutiveFailures(3), Window(1s,1)) is %v, counts %+v", failed.Load(), b.State(), b.Counts())
		}
	})
}
