package registry_test

import (
	"context"
	"errors"
	"runtime"
	"testing"
	"time"

	"github.com/resiliencekit/resiliencekit/limit"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/registry"
	"github.com/resiliencekit/resiliencekit/resilience"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

// The package doc: "one whose retry was refused counts as a failure (its
// last attempt's) and its retry's refusal as one of those". A call whose
// first attempt fails and whose retry the concurrency limit refuses.
func TestReview98RefusedRetryCountsAsFailure(t *testing.T) {
	lim := limit.NewFixed(1)
	hold := make(chan struct{})
	held := make(chan struct{})
	var p *pipeline.Pipeline
	sleep := func(ctx context.Context, d time.Duration) error {
		// while the first call sleeps before its retry, another takes the
		// only slot and keeps it
		go func() {
			_, _ = pipeline.Do(context.Background(), p, func(context.Context) (int, error) {
				close(held)
				<-hold
				return 1, nil
			})
		}()
		<-held
		return nil
	}
	reg := registry.New()
	var err error
	p, err = reg.AddPipeline(pipeline.New(pipeline.WithName("svc"), pipeline.WithLimit(lim),
		pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(3), retrypolicy.WithSleep(sleep)))))
	if err != nil {
		t.Fatal(err)
	}
	defer runtime.KeepAlive(p)
	first := true
	_, err = pipeline.Do(context.Background(), p, func(context.Context) (int, error) {
		if first {
			first = false
			return 0, errors.New("503")
		}
		return 1, nil
	})
	if !errors.Is(err, limit.ErrLimited) {
		t.Logf("call's error: %v (not the limit's refusal: the test's setup did not hold)", err)
	}
	close(hold)
	time.Sleep(50 * time.Millisecond)
	s := reg.Snapshot()
	ps := s.Pipelines[0]
	t.Logf("calls %d attempts %d successes %d failures %d limited %d retries %d", ps.Calls, ps.Attempts, ps.Successes, ps.Failures, ps.Limited, ps.Retries)
	if ps.Calls != 2 || ps.Successes != 1 || ps.Failures != 1 || ps.Limited != 1 {
		t.Errorf("want 2 calls: 1 success, 1 failure (its retry refused), 1 limited")
	}
}

// A call whose operation returns an error of the caller's own making
// (class rejected) counts in Calls alone, as the package doc says.
func TestCallersOwnErrorCountsInCallsAlone(t *testing.T) {
	reg := registry.New()
	p, err := reg.AddPipeline(pipeline.New(pipeline.WithName("own"),
		pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(3)))))
	if err != nil {
		t.Fatal(err)
	}
	_, err = pipeline.Do(context.Background(), p, func(context.Context) (int, error) {
		return 0, resilience.Rejected(errors.New("request over the size limit"))
	})
	if err == nil {
		t.Fatal("no error")
	}
	ps := reg.Snapshot().Pipelines[0]
	if ps.Calls != 1 || ps.Attempts != 0 || ps.Successes != 0 || ps.Failures != 0 || ps.Rejected+ps.Throttled+ps.Limited != 0 {
		t.Errorf("want the call in Calls alone: %+v", ps)
	}
	runtime.KeepAlive(p)
}
