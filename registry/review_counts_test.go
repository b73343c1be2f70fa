package registry_test

import (
	"context"
	"errors"
	"runtime"
	"testing"
	"time"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/limit"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/registry"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

var errBoom27 = errors.New("boom")

func state27(t *testing.T, r *registry.Registry, p *pipeline.Pipeline, name string) registry.PipelineState {
	// The registry forgets a pipeline nothing references: p stays alive until the snapshot is read.
	defer runtime.KeepAlive(p)
	t.Helper()
	for _, ps := range r.Snapshot().Pipelines {
		if ps.Name == name {
			return ps
		}
	}
	t.Fatalf("pipeline %q not in snapshot", name)
	return registry.PipelineState{}
}

// A call that WaitWhenOpen makes wait for the breaker, and that then
// succeeds, is one call: it is counted once as rejected (its first
// refusal) and once more as a first attempt.
func TestWaitWhenOpenCallCountedTwice(t *testing.T) {
	b := breaker.New("edges27-wait", breaker.ConsecutiveFailures(1), breaker.OpenTimeout(30*time.Millisecond))
	r := registry.New()
	p, err := r.AddPipeline(pipeline.New(pipeline.WithBreaker(b), pipeline.WaitWhenOpen()))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	// Call 1 fails and opens the breaker.
	pipeline.Do(ctx, p, func(context.Context) (int, error) { return 0, errBoom27 })
	// Call 2 is refused, waits for the probe, and succeeds.
	cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if _, err := pipeline.Do(cctx, p, func(context.Context) (int, error) { return 1, nil }); err != nil {
		t.Fatalf("call 2: %v", err)
	}
	ps := state27(t, r, p, "edges27-wait")
	if ps.Calls != 2 || ps.Successes != 1 || ps.Failures != 1 {
		t.Errorf("2 calls (1 failed, 1 succeeded after waiting): got Calls=%d Successes=%d Failures=%d Rejected=%d Waited=%d",
			ps.Calls, ps.Successes, ps.Failures, ps.Rejected, ps.Waited)
	}
}

// A call whose retry the breaker stops after the retry was scheduled (it
// opened during the backoff, the common case in an outage) failed: it is
// not counted as a failure, and counts as retried though no retry ran.
func TestFailureLostWhenBreakerOpensDuringBackoff(t *testing.T) {
	b := breaker.New("edges27-backoff", breaker.ConsecutiveFailures(100))
	rp := retrypolicy.New(retrypolicy.MaxAttempts(3), retrypolicy.WithSleep(func(ctx context.Context, d time.Duration) error {
		// Another call's failures open the breaker while this one waits.
		return b.SetMode(ctx, breaker.ForcedOpen, "test")
	}))
	r := registry.New()
	p, err := r.AddPipeline(pipeline.New(pipeline.WithBreaker(b), pipeline.WithRetry(rp)))
	if err != nil {
		t.Fatal(err)
	}
	attempts := 0
	_, err = pipeline.Do(context.Background(), p, func(context.Context) (int, error) { attempts++; return 0, errBoom27 })
	if err == nil || attempts != 1 {
		t.Fatalf("want a failed call of 1 attempt, got err=%v attempts=%d", err, attempts)
	}
	ps := state27(t, r, p, "edges27-backoff")
	if ps.Calls != 1 || ps.Failures != 1 {
		t.Errorf("1 call, failed: got Calls=%d Failures=%d Successes=%d Retries=%d Attempts=%d",
			ps.Calls, ps.Failures, ps.Successes, ps.Retries, ps.Attempts)
	}
}

// A call refused by the concurrency limit is one call: it shows in the
// series both as a failure and as a rejection.
func TestLimitedCallIsFailureAndRejection(t *testing.T) {
	lim := limit.NewFixed(1)
	r := registry.New(registry.Interval(10*time.Millisecond, 100))
	p, err := r.AddPipeline(pipeline.New(pipeline.WithName("edges27-limit"), pipeline.WithLimit(lim)))
	if err != nil {
		t.Fatal(err)
	}
	hold, release := make(chan struct{}), make(chan struct{})
	go pipeline.Do(context.Background(), p, func(context.Context) (int, error) { close(hold); <-release; return 1, nil })
	<-hold
	_, err = pipeline.Do(context.Background(), p, func(context.Context) (int, error) { return 1, nil })
	close(release)
	if !errors.Is(err, limit.ErrLimited) {
		t.Fatalf("want ErrLimited, got %v", err)
	}
	time.Sleep(20 * time.Millisecond)
	ps := state27(t, r, p, "edges27-limit")
	var fail, rej uint64
	for i := range ps.Series.Failures {
		fail += ps.Series.Failures[i]
		rej += ps.Series.Rejections[i]
	}
	if fail+rej != 1 {
		t.Errorf("one refused call: series failures=%d rejections=%d (Failures=%d Limited=%d Calls=%d)", fail, rej, ps.Failures, ps.Limited, ps.Calls)
	}
}

// Stages documents "the values given to the options", but its Retry is
// the policy with the registry's listener in it: a pipeline built from a
// registered pipeline's stages counts its calls into that registration.
func TestStagesRetryCarriesRegistryCounts(t *testing.T) {
	r := registry.New()
	rp := retrypolicy.New(retrypolicy.MaxAttempts(2))
	obs, err := r.AddPipeline(pipeline.New(pipeline.WithName("edges27-stages"), pipeline.WithRetry(rp)))
	if err != nil {
		t.Fatal(err)
	}
	if obs.Stages().Retry != rp {
		t.Errorf("Stages().Retry is not the policy given to WithRetry")
	}
	other := pipeline.New(pipeline.WithName("edges27-other"), pipeline.WithRetry(obs.Stages().Retry))
	for range 5 {
		pipeline.Do(context.Background(), other, func(context.Context) (int, error) { return 1, nil })
	}
	if ps := state27(t, r, obs, "edges27-stages"); ps.Calls != 0 || ps.Attempts != 0 {
		t.Errorf("no call went through the registered pipeline, it shows Calls=%d Attempts=%d", ps.Calls, ps.Attempts)
	}
}
