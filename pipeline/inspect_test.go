package pipeline_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/hedge"
	"github.com/resiliencekit/resiliencekit/limit"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
	"github.com/resiliencekit/resiliencekit/throttle"
)

func TestStagesAreTheOnesGiven(t *testing.T) {
	b, r, th, l, h := breaker.New("orders"), retrypolicy.New(), throttle.New(), limit.NewFixed(3), hedge.New()
	p := pipeline.New(pipeline.WithBreaker(b), pipeline.WithRetry(r), pipeline.WithThrottle(th), pipeline.WithLimit(l), pipeline.WithHedging(h))
	st := p.Stages()
	assert.Equal(t, "orders", st.Name, "the breaker's name")
	assert.Same(t, b, st.Breaker)
	assert.Same(t, th, st.Throttle)
	assert.Same(t, l, st.Limit)
	assert.Same(t, h, st.Hedging)
	assert.NotNil(t, st.Retry)
	assert.False(t, st.WaitWhenOpen)
	assert.Equal(t, "x", p.With(pipeline.WithName("x")).Stages().Name)
	assert.Equal(t, pipeline.Stages{}, (*pipeline.Pipeline)(nil).Stages())
	assert.Zero(t, p.Waiting())
}

func TestWaitingCountsTheCallsWaitingForTheBreaker(t *testing.T) {
	b := breaker.New("flaky", breaker.ConsecutiveFailures(1), breaker.OpenTimeout(50*time.Millisecond))
	p := pipeline.New(pipeline.WithBreaker(b), pipeline.WaitWhenOpen(), pipeline.WithTimeBudget(5*time.Second))
	assert.True(t, p.Stages().WaitWhenOpen)
	_, _ = pipeline.Do(context.Background(), p, func(context.Context) (int, error) { return 0, errDown })
	done := make(chan struct{})
	release := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = pipeline.Do(context.Background(), p, func(context.Context) (int, error) { <-release; return 1, nil })
	}()
	require.Eventually(t, func() bool { return p.Waiting() == 1 }, 2*time.Second, time.Millisecond)
	close(release)
	<-done
	assert.Zero(t, p.Waiting())
}
