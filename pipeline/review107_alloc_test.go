package pipeline_test

import (
	"context"
	"testing"
	"time"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/limit"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
	"github.com/resiliencekit/resiliencekit/throttle"
)

func TestReview107SuccessAllocatesNothing(t *testing.T) {
	p := pipeline.New(
		pipeline.WithBreaker(breaker.New("r107a")),
		pipeline.WithThrottle(throttle.New()),
		pipeline.WithLimit(limit.NewAIMD()),
		pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(3), retrypolicy.BaseDelay(time.Microsecond))),
	)
	op := func(context.Context) (int, error) { return 1, nil }
	ctx := context.Background()
	for range 100 {
		_, _ = pipeline.Do(ctx, p, op)
	}
	if n := testing.AllocsPerRun(1000, func() { _, _ = pipeline.Do(ctx, p, op) }); n != 0 {
		t.Errorf("success with breaker, throttle, limit, retry: %v allocs", n)
	}
}
