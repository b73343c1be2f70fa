package pipeline

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/hedge"
	"github.com/resiliencekit/resiliencekit/limit"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

// review134: real time, no bubble: hedged calls that their callers hang
// up on or that their deadlines end, with several hedges and a
// concurrency limit, leave no goroutine behind once their operations have
// returned.
func TestReview134NoLeakRealTime(t *testing.T) {
	opt := goleak.IgnoreCurrent()
	pol := hedge.New(hedge.Delay(2*time.Millisecond), hedge.MaxShare(1), hedge.MaxExtra(3))
	p := New(WithHedging(pol), WithBreaker(breaker.New("leak", breaker.ConsecutiveFailures(1<<30))),
		WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(2))), WithLimit(limit.NewFixed(4)))
	op := func(ctx context.Context) (int, error) {
		if p.IsHedge(ctx) {
			if time.Now().UnixNano()%2 == 0 {
				return 0, errors.New("503")
			}
		}
		<-ctx.Done()
		return 0, ctx.Err()
	}
	done := make(chan struct{})
	for i := range 40 {
		go func() {
			defer func() { done <- struct{}{} }()
			var ctx context.Context
			var cancel context.CancelFunc
			if i%2 == 0 {
				ctx, cancel = context.WithTimeout(context.Background(), 15*time.Millisecond)
			} else {
				ctx, cancel = context.WithCancel(context.Background())
				time.AfterFunc(10*time.Millisecond, cancel)
			}
			defer cancel()
			_, _ = Do(ctx, p, op, Discard(func(int) {}))
		}()
	}
	for range 40 {
		<-done
	}
	goleak.VerifyNone(t, opt, goleak.IgnoreTopFunction("time.Sleep"))
}
