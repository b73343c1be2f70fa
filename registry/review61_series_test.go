package registry_test

import (
	"context"
	"errors"
	"math"
	"runtime"
	"testing"
	"time"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/registry"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

// TestReview61FailureThenRetrySucceeds: a snapshot (a dashboard page
// open) taken while a call's first attempt has failed and its retry is
// sleeping, then another after its retry succeeded. The call is one
// success and no failure; no series point may be absurd.
func TestReview61FailureThenRetrySucceeds(t *testing.T) {
	const iv = 20 * time.Millisecond
	reg := registry.New(registry.Interval(iv, 50))
	p, err := reg.AddPipeline(pipeline.New(pipeline.WithBreaker(breaker.New("dep")),
		pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(2), retrypolicy.BaseDelay(100*time.Millisecond), retrypolicy.MaxDelay(100*time.Millisecond), retrypolicy.Jitter(retrypolicy.None)))))
	defer runtime.KeepAlive(p) // the registry forgets a pipeline nothing references
	if err != nil {
		t.Fatal(err)
	}
	failed := make(chan struct{})
	done := make(chan error)
	go func() {
		n := 0
		_, err := pipeline.Do(context.Background(), p, func(ctx context.Context) (int, error) {
			n++
			if n == 1 {
				close(failed)
				return 0, errors.New("503")
			}
			return 1, nil
		})
		done <- err
	}()
	<-failed
	time.Sleep(2 * iv)
	s1 := reg.Snapshot()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * iv)
	s2 := reg.Snapshot()
	p1, p2 := s1.Pipelines[0], s2.Pipelines[0]
	t.Logf("mid-call: successes=%d failures=%d; after: successes=%d failures=%d", p1.Successes, p1.Failures, p2.Successes, p2.Failures)
	t.Logf("pipeline failure series %v; breaker failure series %v", p2.Series.Failures, s2.Breakers[0].Series.Failures)
	for _, x := range append(append([]uint64{}, p2.Series.Failures...), s2.Breakers[0].Series.Failures...) {
		if x > 1000 {
			t.Fatalf("a failure point of %d from one call", x)
		}
	}
	if p2.Failures != 0 || p2.Successes != 1 {
		t.Errorf("after: failures %d successes %d", p2.Failures, p2.Successes)
	}
	if p2.CallsPerSec < 0 || math.IsInf(p2.CallsPerSec, 0) {
		t.Errorf("rate %v", p2.CallsPerSec)
	}
}

// TestReview61SeriesUnderLoad: a healthy dependency with blips (5% of
// first attempts fail, every retry succeeds: no call fails), 16 goroutines, a snapshot every
// interval as an open page takes; every point of every series is at most
// the calls made, and the points of successes sum to the successes.
func TestReview61SeriesUnderLoad(t *testing.T) {
	const iv = 5 * time.Millisecond
	reg := registry.New(registry.Interval(iv, 100000))
	p, err := reg.AddPipeline(pipeline.New(pipeline.WithBreaker(breaker.New("dep", breaker.ConsecutiveFailures(1<<30))),
		pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(3), retrypolicy.BaseDelay(time.Millisecond), retrypolicy.MaxDelay(2*time.Millisecond)))))
	defer runtime.KeepAlive(p) // the registry forgets a pipeline nothing references
	if err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	finished := make(chan struct{})
	for g := 0; g < 16; g++ {
		go func() {
			defer func() { finished <- struct{}{} }()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				n := 0
				_, _ = pipeline.Do(context.Background(), p, func(ctx context.Context) (int, error) {
					n++
					if n == 1 && time.Now().UnixNano()%20 == 0 { // a blip: 5% of first attempts, retried with success
						return 0, errors.New("503")
					}
					return 1, nil
				})
			}
		}()
	}
	bad := 0
	for range 200 {
		time.Sleep(iv)
		s := reg.Snapshot()
		ps := s.Pipelines[0]
		for _, x := range ps.Series.Failures {
			if x > ps.Calls {
				bad++
				break
			}
		}
	}
	close(stop)
	for range 16 {
		<-finished
	}
	t.Logf("snapshots with a failure point above all calls made: %d of 200", bad)
	if bad > 0 {
		t.Errorf("%d of 200 snapshots had a wrapped failure point", bad)
	}
}
