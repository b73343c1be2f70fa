package retrysignal_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/hedge"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
	"github.com/resiliencekit/resiliencekit/retrysignal"
)

func rp52(n int) *retrypolicy.Policy {
	return retrypolicy.New(retrypolicy.MaxAttempts(n), retrypolicy.BaseDelay(time.Millisecond), retrypolicy.MaxDelay(2*time.Millisecond))
}

func hang52(ctx context.Context) (int, error) {
	<-ctx.Done()
	return 0, ctx.Err()
}

var errT52 = errors.New("transient")

// slowFail fails after d, so the second attempt runs out of the budget.
func slowFail52(d time.Duration) func(ctx context.Context) (int, error) {
	return func(ctx context.Context) (int, error) {
		select {
		case <-time.After(d):
			return 0, errT52
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
}

func TestReview52_RetriedOwnBudget(t *testing.T) {
	type tc struct {
		name   string
		p      *pipeline.Pipeline
		op     func(context.Context) (int, error)
		caller time.Duration // 0: no deadline
		stream bool
		single bool
		want   bool
	}
	mk := func(opts ...pipeline.Option) *pipeline.Pipeline { return pipeline.New(opts...) }
	cases := []tc{
		{"own budget, one attempt hung", mk(pipeline.WithRetry(rp52(3)), pipeline.WithTimeBudget(80*time.Millisecond)), hang52, 2 * time.Second, false, false, false},
		{"own budget, no caller deadline", mk(pipeline.WithRetry(rp52(3)), pipeline.WithTimeBudget(80*time.Millisecond)), hang52, 0, false, false, false},
		{"caller deadline first", mk(pipeline.WithRetry(rp52(3)), pipeline.WithTimeBudget(2*time.Second)), hang52, 80 * time.Millisecond, false, false, true},
		{"own budget, two attempts", mk(pipeline.WithRetry(rp52(3)), pipeline.WithTimeBudget(80*time.Millisecond)), slowFail52(50 * time.Millisecond), 2 * time.Second, false, false, true},
		{"own budget behind breaker", mk(pipeline.WithRetry(rp52(3)), pipeline.WithTimeBudget(80*time.Millisecond), pipeline.WithBreaker(breaker.New("b1"))), hang52, 2 * time.Second, false, false, false},
		{"own budget, wait when open", mk(pipeline.WithRetry(rp52(3)), pipeline.WithTimeBudget(80*time.Millisecond), pipeline.WithBreaker(breaker.New("b2")), pipeline.WaitWhenOpen()), hang52, 2 * time.Second, false, false, false},
		// A hedge sent is a second request, as the two attempts above.
		{"own budget, hedged", mk(pipeline.WithRetry(rp52(3)), pipeline.WithTimeBudget(80*time.Millisecond), pipeline.WithHedging(hedge.New(hedge.Delay(10*time.Millisecond)))), hang52, 2 * time.Second, false, false, true},
		{"own budget, stream", mk(pipeline.WithRetry(rp52(3)), pipeline.WithTimeBudget(80*time.Millisecond)), hang52, 2 * time.Second, true, false, false},
		{"own budget, single attempt", mk(pipeline.WithRetry(rp52(3)), pipeline.WithTimeBudget(80*time.Millisecond)), hang52, 2 * time.Second, false, true, false},
		{"own budget, no retry stage", mk(pipeline.WithTimeBudget(80 * time.Millisecond)), hang52, 2 * time.Second, false, false, false},
		{"own budget, attempt timeout", mk(pipeline.WithRetry(rp52(3)), pipeline.WithTimeBudget(80*time.Millisecond), pipeline.WithAttemptTimeout(60*time.Millisecond)), hang52, 2 * time.Second, false, false, true},
	}
	// nested: outer budget shorter than caller; inner has no budget and retries
	inner := mk(pipeline.WithRetry(rp52(3)))
	outer := mk(pipeline.WithTimeBudget(80 * time.Millisecond))
	cases = append(cases, tc{"nested: outer own budget, inner plain", outer, func(ctx context.Context) (int, error) {
		return pipeline.Do(ctx, inner, hang52)
	}, 2 * time.Second, false, false, false})
	outerR := mk(pipeline.WithRetry(rp52(3)), pipeline.WithTimeBudget(80*time.Millisecond))
	cases = append(cases, tc{"nested: outer own budget+retry, inner plain", outerR, func(ctx context.Context) (int, error) {
		return pipeline.Do(ctx, inner, hang52)
	}, 2 * time.Second, false, false, false})
	// nested: inner own budget (shorter than outer's caller deadline), outer no budget, no retry
	innerB := mk(pipeline.WithRetry(rp52(3)), pipeline.WithTimeBudget(80*time.Millisecond))
	outerP := mk()
	cases = append(cases, tc{"nested: inner own budget, outer plain", outerP, func(ctx context.Context) (int, error) {
		return pipeline.Do(ctx, innerB, hang52)
	}, 2 * time.Second, false, false, false})
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ctx := context.Background()
			if c.caller > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, c.caller)
				defer cancel()
			}
			var opts []pipeline.CallOption
			if c.single {
				opts = append(opts, pipeline.SingleAttempt())
			}
			var err error
			if c.stream {
				var rel func()
				_, rel, err = pipeline.DoStream(ctx, c.p, c.op, opts...)
				if rel != nil {
					rel()
				}
			} else {
				_, err = pipeline.Do(ctx, c.p, c.op, opts...)
			}
			var re *retrypolicy.Error
			errors.As(err, &re)
			got := retrysignal.Retried(err)
			if re != nil {
				t.Logf("err=%v attempts=%d reason=%v own=%v retried=%v", err, re.Attempts, re.Reason, re.OwnBudget, got)
			} else {
				t.Logf("err=%v retried=%v", err, got)
			}
			if got != c.want {
				t.Errorf("Retried = %v, want %v", got, c.want)
			}
		})
	}
}

// Nested: the inner pipeline retried (several attempts), then the outer
// pipeline's own budget (shorter than the caller's deadline) ran out. The
// service did what retrying would: its caller must not retry.
func TestReview52_NestedInnerRetriedOuterBudget(t *testing.T) {
	inner := pipeline.New(pipeline.WithRetry(rp52(5)))
	for _, outer := range []struct {
		name string
		p    *pipeline.Pipeline
	}{
		{"outer budget only", pipeline.New(pipeline.WithTimeBudget(100 * time.Millisecond))},
		{"outer budget+breaker", pipeline.New(pipeline.WithTimeBudget(100*time.Millisecond), pipeline.WithBreaker(breaker.New("n")))},
		{"outer budget+retry(1)", pipeline.New(pipeline.WithTimeBudget(100*time.Millisecond), pipeline.WithRetry(rp52(1)))},
	} {
		t.Run(outer.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			attempts := 0
			_, err := pipeline.Do(ctx, outer.p, func(ctx context.Context) (int, error) {
				return pipeline.Do(ctx, inner, func(ctx context.Context) (int, error) {
					attempts++
					return slowFail52(30 * time.Millisecond)(ctx)
				})
			})
			got := retrysignal.Retried(err)
			t.Logf("inner attempts=%d err=%v retried=%v", attempts, err, got)
			if attempts > 1 && !got {
				t.Errorf("inner made %d attempts but Retried=false: the caller retries too", attempts)
			}
		})
	}
}
