package registry_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/registry"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

// Several pipelines on one breaker, calls that fail and are retried
// (some succeed on retry, some canceled attempts retried by RetryIf),
// snapshots taken concurrently: once all is over and nothing has left
// the window, each pipeline's series adds up to its Failures, and the
// breaker's to the sum of its pipelines'.
func TestReview137SeriesStress(t *testing.T) {
	for run := range 3 {
		reg := registry.New(registry.Interval(time.Millisecond, registry.MaxPoints))
		b := breaker.New(fmt.Sprint("r137-stress-", run), breaker.ConsecutiveFailures(1<<30), breaker.FailureRate(1, 1<<30))
		var ps []*pipeline.Pipeline
		for i := range 3 {
			p, err := reg.AddPipeline(pipeline.New(pipeline.WithName(fmt.Sprint("p", run, i)), pipeline.WithBreaker(b),
				pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(3), retrypolicy.BaseDelay(100*time.Microsecond),
					retrypolicy.RetryIf(func(err error) bool { return true })))))
			if err != nil {
				t.Fatal(err)
			}
			ps = append(ps, p)
		}
		stop := make(chan struct{})
		var snaps sync.WaitGroup
		for range 2 {
			snaps.Go(func() {
				for {
					select {
					case <-stop:
						return
					default:
						reg.Snapshot()
						time.Sleep(200 * time.Microsecond)
					}
				}
			})
		}
		var calls sync.WaitGroup
		var n atomic.Int64
		for g := range 6 {
			calls.Go(func() {
				p := ps[g%len(ps)]
				for range 300 {
					n.Add(1)
					pipeline.Do(context.Background(), p, func(ctx context.Context) (int, error) {
						switch rand.IntN(4) {
						case 0:
							return 0, errors.New("503")
						case 1:
							return 0, fmt.Errorf("own: %w", context.Canceled)
						}
						return 1, nil
					})
				}
			})
		}
		calls.Wait()
		close(stop)
		snaps.Wait()
		time.Sleep(2 * time.Millisecond)
		s := reg.Snapshot()
		var sum uint64
		for _, p := range s.Pipelines {
			if got := r137Sum(p.Series.Failures); got != p.Failures {
				t.Errorf("run %d pipeline %s: Failures %d, series adds to %d", run, p.Name, p.Failures, got)
			}
			sum += r137Sum(p.Series.Failures)
		}
		if got := r137Sum(s.Breakers[0].Series.Failures); got != sum {
			t.Errorf("run %d breaker: series adds to %d, its pipelines' to %d", run, got, sum)
		}
		runtime.KeepAlive(ps) // a pipeline collected leaves the snapshot, its points stay in the breaker's
	}
}
