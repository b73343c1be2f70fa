package registry_test

import (
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/registry"
)

// TestReview61CallerCancelNotAFailure: callers that give up mid-attempt
// (context canceled) against a healthy but slowish dependency. The breaker
// excludes them (not failures); the dashboard's failures and the failure
// sparkline of the breaker's tile should not show the dependency failing.
func TestReview61CallerCancelNotAFailure(t *testing.T) {
	const iv = 10 * time.Millisecond
	reg := registry.New(registry.Interval(iv, 100))
	b := breaker.New("dep")
	p, err := reg.AddPipeline(pipeline.New(pipeline.WithBreaker(b)))
	defer runtime.KeepAlive(p) // the registry forgets a pipeline nothing references
	if err != nil {
		t.Fatal(err)
	}
	reg.Snapshot()
	for range 20 {
		ctx, cancel := context.WithCancel(context.Background())
		go func() { time.Sleep(time.Millisecond); cancel() }()
		_, _ = pipeline.Do(ctx, p, func(ctx context.Context) (int, error) {
			<-ctx.Done()
			return 0, ctx.Err()
		})
	}
	time.Sleep(2 * iv)
	s := reg.Snapshot()
	ps, bs := s.Pipelines[0], s.Breakers[0]
	var sparkFail uint64
	for _, x := range bs.Series.Failures {
		sparkFail += x
	}
	t.Logf("pipeline calls=%d failures=%d; breaker failures=%d exclusions=%d; breaker tile failure sparkline sum=%d",
		ps.Calls, ps.Failures, bs.Counts.TotalFailures, bs.Counts.TotalExclusions, sparkFail)
	if ps.Failures != 0 || sparkFail != 0 {
		t.Errorf("caller cancellations shown as %d failures (sparkline %d); the breaker counts %d", ps.Failures, sparkFail, bs.Counts.TotalFailures)
	}
}
