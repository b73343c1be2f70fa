package registry_test

import (
	"context"
	"errors"
	"github.com/stretchr/testify/assert"
	"testing"
	"time"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/registry"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

// Doc: a registered pipeline's success path costs no allocation.
func TestReview95SuccessPathAllocs(t *testing.T) {
	r := registry.New()
	p, _ := r.AddPipeline(pipeline.New(pipeline.WithBreaker(breaker.New("alloc95")),
		pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(3)))))
	op := func(context.Context) (int, error) { return 1, nil }
	plain := pipeline.New(pipeline.WithBreaker(breaker.New("alloc95b")), pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(3))))
	ctx := context.Background()
	a := testing.AllocsPerRun(2000, func() { pipeline.Do(ctx, p, op) })
	b := testing.AllocsPerRun(2000, func() { pipeline.Do(ctx, plain, op) })
	t.Logf("allocs per call: registered %.2f, unregistered %.2f", a, b)
	if a > b {
		t.Errorf("registration adds %.2f allocations per successful call", a-b)
	}
}

// A caller that cancels during the backoff: one call, one failure (its
// last attempt failed), one attempt. No jitter: a full-jitter delay under
// MaxDelay's 10 s fell below the 20 ms to the cancel once in CI.
func TestReview95CancelMidBackoff(t *testing.T) {
	r := registry.New()
	p, _ := r.AddPipeline(pipeline.New(pipeline.WithName("cb95"),
		pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(3), retrypolicy.BaseDelay(time.Hour), retrypolicy.Jitter(retrypolicy.None)))))
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(20*time.Millisecond, cancel)
	_, err := pipeline.Do(ctx, p, func(context.Context) (int, error) { return 0, errors.New("down") })
	s := r95State(t, r, p, "cb95")
	t.Logf("err %v; %+v", err, s)
	if s.Calls != 1 || s.Attempts != 1 || s.Failures != 1 || s.Retries != 0 {
		t.Errorf("calls %d attempts %d failures %d retries %d", s.Calls, s.Attempts, s.Failures, s.Retries)
	}
}

// Interval's points have no upper bound: each registered pipeline and
// breaker allocates 3 slices of that capacity at once.
// Run with REVIEW95_HUGE=1: it ends the process (fatal out of memory).
func TestReview95HugePoints(t *testing.T) {
	// Accepted, it made AddPipeline run the process out of memory (fatal,
	// not a panic): three series of that many points a pipeline.
	assert.PanicsWithValue(t, "registry: Interval(1s, 1099511627776): d must be more than 0 and points from 1 to 100000", func() {
		registry.Interval(time.Second, 1<<40)
	})
	assert.NotPanics(t, func() { registry.Interval(time.Second, registry.MaxPoints) })
}
