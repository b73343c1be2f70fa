package pipeline

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/hedge"
	"github.com/resiliencekit/resiliencekit/limit"
	"github.com/resiliencekit/resiliencekit/resilience"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
	"github.com/resiliencekit/resiliencekit/throttle"
)

// A successful call allocates nothing but the contexts it makes: one for
// a time budget or an attempt timeout (a budget's with its first
// attempt's), one for hedging (the first attempt's context, the race's
// memory being the last call's; a streamed call's race, with the context,
// is its own). A streamed call that makes a
// context keeps it until released, at three allocations more; one that
// makes none keeps nothing.
func TestAllocsSuccess(t *testing.T) {
	ok := func(ctx context.Context) (int, error) { return 1, nil }
	cfgs := []struct {
		name         string
		opts         []Option
		do, doStream float64
	}{
		{"breaker+retry", []Option{WithBreaker(breaker.New("a")), WithRetry(retrypolicy.New())}, 0, 0},
		{"budget+breaker+retry", []Option{WithTimeBudget(time.Second), WithBreaker(breaker.New("b")), WithRetry(retrypolicy.New())}, 1, 4},
		{"waitopen closed", []Option{WithBreaker(breaker.New("c")), WithRetry(retrypolicy.New()), WaitWhenOpen()}, 0, 0},
		{"waitopen closed+budget", []Option{WithTimeBudget(time.Second), WithBreaker(breaker.New("c2")), WithRetry(retrypolicy.New()), WaitWhenOpen()}, 1, 4},
		{"limit", []Option{WithBreaker(breaker.New("d")), WithRetry(retrypolicy.New()), WithLimit(limit.NewAIMD())}, 0, 0},
		{"throttle", []Option{WithBreaker(breaker.New("e")), WithRetry(retrypolicy.New()), WithThrottle(throttle.New())}, 0, 0},
		{"attempt timeout", []Option{WithBreaker(breaker.New("f")), WithRetry(retrypolicy.New()), WithAttemptTimeout(time.Second)}, 1, 4},
		{"hedge fixed, no fire", []Option{WithBreaker(breaker.New("g")), WithRetry(retrypolicy.New()), WithHedging(hedge.New(hedge.Delay(time.Hour)))}, 1, 4},
	}
	for _, c := range cfgs {
		t.Run(c.name, func(t *testing.T) {
			p := New(c.opts...)
			assert.Equal(t, c.do, testing.AllocsPerRun(200, func() { _, _ = Do(context.Background(), p, ok) }), "Do")
			assert.Equal(t, c.doStream, testing.AllocsPerRun(200, func() {
				_, release, _ := DoStream(context.Background(), p, ok)
				release()
			}), "DoStream")
		})
	}
}

// allocFreeTrace is a tracer that allocates nothing of its own.
type allocFreeTrace struct{}

func (allocFreeTrace) StartCall(ctx context.Context, _ string) (context.Context, resilience.CallTrace) {
	return ctx, allocFreeTrace{}
}
func (allocFreeTrace) StartAttempt(ctx context.Context, _ resilience.AttemptInfo) (context.Context, func(error)) {
	return ctx, nil
}
func (allocFreeTrace) End(error) {}

// A traced call allocates its state, and nothing more for a tracer that
// allocates nothing: the call's error, which an end left pending while
// spans start must keep, goes to the heap only then.
func TestATracedCallAllocatesItsStateOnly(t *testing.T) {
	p := New(WithTracer(allocFreeTrace{}))
	op := func(context.Context) (int, error) { return 1, nil }
	assert.Equal(t, 1.0, testing.AllocsPerRun(200, func() { _, _ = Do(context.Background(), p, op) }))
}
