package registry_test

import (
	"context"
	"runtime"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/registry"
	"github.com/resiliencekit/resiliencekit/resilience"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

// heldRetry returns a pipeline option whose retry waits, in its backoff,
// until release is closed.
func r137HeldRetry(release <-chan struct{}) pipeline.Option {
	return pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(2),
		retrypolicy.WithSleep(func(ctx context.Context, d time.Duration) error {
			select {
			case <-release:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		})))
}

func r137Sum(xs []uint64) (s uint64) {
	for _, x := range xs {
		s += x
	}
	return s
}

func r137Find[T any](xs []T, name func(T) string, n string) T {
	i := slices.IndexFunc(xs, func(x T) bool { return name(x) == n })
	return xs[i]
}

// A breaker's series is the sum of its pipelines' (registry.go: "its
// successes, failures and rejections over time are those of the
// registered pipelines built on it"): point by point, not only in total.
// Pipeline B's first attempt fails in interval 1, pipeline A's call fails
// in interval 2, B's retry succeeds in interval 3: B takes its failure
// back from its own point 1, the breaker from its newest point that has
// one, point 2 (A's).
func TestReview137BreakerSeriesPointwise(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := breaker.New("r137-shared")
		reg := registry.New(registry.Interval(time.Second, 10))
		release := make(chan struct{})
		pa, err := reg.AddPipeline(pipeline.New(pipeline.WithName("A"), pipeline.WithBreaker(b),
			pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(1)))))
		if err != nil {
			t.Fatal(err)
		}
		pb, err := reg.AddPipeline(pipeline.New(pipeline.WithName("B"), pipeline.WithBreaker(b), r137HeldRetry(release)))
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error)
		go func() {
			_, err := pipeline.Do(t.Context(), pb, r137Seq(r137Transient))
			done <- err
		}()
		synctest.Wait() // B's first attempt failed; its retry waits
		time.Sleep(time.Second)
		reg.Snapshot()
		pipeline.Do(t.Context(), pa, r137Seq(r137Transient))
		time.Sleep(time.Second)
		reg.Snapshot()
		close(release)
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Second)
		s := reg.Snapshot()
		runtime.KeepAlive([]any{pa, pb}) // the registry holds them weakly
		sa := r137Find(s.Pipelines, func(p registry.PipelineState) string { return p.Name }, "A").Series.Failures
		sb := r137Find(s.Pipelines, func(p registry.PipelineState) string { return p.Name }, "B").Series.Failures
		bs := s.Breakers[0].Series.Failures
		t.Logf("A %v B %v breaker %v", sa, sb, bs)
		if len(sa) != len(bs) || len(sb) != len(bs) {
			t.Fatalf("lengths differ")
		}
		for i := range bs {
			if bs[i] != sa[i]+sb[i] {
				t.Errorf("point %d: breaker %d failures, its pipelines %d+%d", i, bs[i], sa[i], sb[i])
			}
		}
	})
}

// A failure taken back comes off the newest point that has one
// (documented, series.takeBack): 3 points. X's first attempt fails in
// interval 1 (its retry waits), Y's call fails in interval 2, X's retry
// succeeds in interval 3: the series keeps interval 1's failure, not Y's,
// and once that point leaves the window the series shows none of the one
// failure counted. review137 asked for the failure's own point; the
// counts do not say which call a failure was, and a window as short as a
// call is the only place the difference shows.
func TestReview137SeriesTakesBackTheNewest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reg := registry.New(registry.Interval(time.Second, 3))
		release := make(chan struct{})
		p, err := reg.AddPipeline(pipeline.New(pipeline.WithName("P"), r137HeldRetry(release)))
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error)
		go func() {
			_, err := pipeline.Do(t.Context(), p, r137Seq(r137Transient))
			done <- err
		}()
		synctest.Wait()
		time.Sleep(time.Second)
		reg.Snapshot() // [1]
		pipeline.Do(t.Context(), p, r137Seq(resilience.Terminal(r137Transient)))
		time.Sleep(time.Second)
		reg.Snapshot() // [1 1]
		close(release)
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Second)
		s3 := reg.Snapshot().Pipelines[0]
		time.Sleep(time.Second)
		s4 := reg.Snapshot().Pipelines[0]
		runtime.KeepAlive(p) // the registry holds it weakly
		t.Logf("after interval 3: F=%d %v; after interval 4: F=%d %v", s3.Failures, s3.Series.Failures, s4.Failures, s4.Series.Failures)
		if s3.Failures != 1 || !slices.Equal(s3.Series.Failures, []uint64{1, 0, 0}) || s4.Failures != 1 || r137Sum(s4.Series.Failures) != 0 {
			t.Errorf("want F=1 [1 0 0] then F=1 and none drawn, as documented: F=%d %v, then F=%d %v",
				s3.Failures, s3.Series.Failures, s4.Failures, s4.Series.Failures)
		}
	})
}
