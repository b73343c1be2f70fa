package pipeline_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/hedge"
	"github.com/resiliencekit/resiliencekit/limit"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/resilience"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

func review117Sleep(ctx context.Context, d time.Duration) error {
	select {
	case <-time.After(d):
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// A hedge takes a free slot of the concurrency limit: with no queue, a
// call that comes while another call's hedge holds the last slot has its
// first attempt refused (limit.ErrLimited), though without hedging it would
// have been sent and answered by a healthy dependency. WithLimit says a
// hedge never queues "where it would take the place of another call's
// first attempt"; without a queue it takes that place all the same.
func TestReview117HedgeTakesAFirstAttemptsSlot(t *testing.T) {
	for _, hedging := range []bool{false, true} {
		synctest.Test(t, func(t *testing.T) {
			opts := []pipeline.Option{pipeline.WithLimit(limit.NewFixed(2))}
			if hedging {
				opts = append(opts, pipeline.WithHedging(hedge.New(hedge.Delay(10*time.Millisecond))))
			}
			p := pipeline.New(opts...)
			op := func(ctx context.Context) (int, error) { return 1, review117Sleep(ctx, 100*time.Millisecond) }
			go pipeline.Do(context.Background(), p, op) // call A: slow, healthy
			time.Sleep(20 * time.Millisecond)           // A's hedge, if any, was sent at 10 ms
			_, err := pipeline.Do(context.Background(), p, op)
			if err != nil {
				t.Errorf("hedging %v: call B failed: %v (a plain client, or the same pipeline without hedging, completes it)", hedging, err)
			}
			time.Sleep(time.Second)
		})
	}
}

// Same with a queue: B waits for a slot that A's hedge holds, and its
// time budget runs out waiting, where without hedging B had a slot at once.
func TestReview117HedgeMakesAFirstAttemptWaitOutItsBudget(t *testing.T) {
	for _, hedging := range []bool{false, true} {
		synctest.Test(t, func(t *testing.T) {
			opts := []pipeline.Option{pipeline.WithLimit(limit.NewFixed(2, limit.MaxWaiting(10))), pipeline.WithTimeBudget(150 * time.Millisecond)}
			if hedging {
				opts = append(opts, pipeline.WithHedging(hedge.New(hedge.Delay(10*time.Millisecond))))
			}
			p := pipeline.New(opts...)
			slowA := func(ctx context.Context) (int, error) { return 1, review117Sleep(ctx, 140*time.Millisecond) }
			go pipeline.Do(context.Background(), p, slowA)
			time.Sleep(20 * time.Millisecond)
			fastB := func(ctx context.Context) (int, error) { return 1, review117Sleep(ctx, 100*time.Millisecond) }
			_, err := pipeline.Do(context.Background(), p, fastB)
			if err != nil {
				t.Errorf("hedging %v: call B failed: %v", hedging, err)
			}
			time.Sleep(time.Second)
		})
	}
}

// MaxShare under a burst: 1000 slow calls at once, each could hedge after
// 10 ms; at most 10% of the calls plus one are hedged in the window.
func TestReview117MaxShareUnderBurst(t *testing.T) {
	for _, extra := range []int{1, 3} {
		synctest.Test(t, func(t *testing.T) {
			p := pipeline.New(pipeline.WithHedging(hedge.New(hedge.Delay(10*time.Millisecond), hedge.MaxExtra(extra))))
			var hedges atomic.Int64
			op := func(ctx context.Context) (int, error) {
				if p.IsHedge(ctx) {
					hedges.Add(1)
				}
				return 1, review117Sleep(ctx, 100*time.Millisecond)
			}
			var wg sync.WaitGroup
			for range 1000 {
				wg.Add(1)
				go func() { defer wg.Done(); pipeline.Do(context.Background(), p, op) }()
			}
			wg.Wait()
			if h := hedges.Load(); h > 101 {
				t.Errorf("MaxExtra %d: %d hedges for 1000 calls, MaxShare 10%% plus one allows 101", extra, h)
			}
		})
	}
}

// A hedge that wins cancels the first attempt; neither that cancellation
// nor a losing hedge's teaches the adaptive limit a failure, nor counts
// against the breaker.
func TestReview117LosersTeachNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lim := limit.NewAIMD(limit.Initial(10))
		b := breaker.New("r117", breaker.ConsecutiveFailures(1))
		p := pipeline.New(pipeline.WithLimit(lim), pipeline.WithBreaker(b),
			pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(2))),
			pipeline.WithTimeBudget(time.Second), pipeline.WithAttemptTimeout(500*time.Millisecond),
			pipeline.WithHedging(hedge.New(hedge.Delay(10*time.Millisecond), hedge.MaxShare(1))))
		var n atomic.Int64
		for i := range 20 {
			_, err := pipeline.Do(context.Background(), p, func(ctx context.Context) (int, error) {
				k := n.Add(1)
				if k%2 == 1 { // first attempt: slow; answers with a reset once canceled
					if review117Sleep(ctx, 300*time.Millisecond) != nil {
						return 0, errors.New("connection reset by peer")
					}
					return 1, nil
				}
				return 2, review117Sleep(ctx, time.Millisecond)
			})
			if err != nil {
				t.Fatalf("call %d: %v", i, err)
			}
		}
		if got := lim.Limit(); got < 10 {
			t.Errorf("limit fell to %d on races won by hedges", got)
		}
		if s := b.State(); s != resilience.StateClosed {
			t.Errorf("breaker %v", s)
		}
	})
}

// Every attempt's context, hedges' included, ends by the time budget; none
// outlives the call's budget.
func TestReview117HedgeNeverOutlivesBudget(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := pipeline.New(pipeline.WithTimeBudget(100*time.Millisecond),
			pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(5))),
			pipeline.WithHedging(hedge.New(hedge.Delay(30*time.Millisecond), hedge.MaxExtra(10), hedge.MaxShare(1))))
		start := time.Now()
		var latest atomic.Int64
		_, err := pipeline.Do(context.Background(), p, func(ctx context.Context) (int, error) {
			dl, ok := ctx.Deadline()
			if !ok || dl.Sub(start) > 100*time.Millisecond {
				t.Errorf("attempt deadline %v after start (ok %v)", dl.Sub(start), ok)
			}
			<-ctx.Done()
			if d := time.Since(start); int64(d) > latest.Load() {
				latest.Store(int64(d))
			}
			return 0, ctx.Err()
		})
		synctest.Wait()
		if err == nil {
			t.Fatal("no error")
		}
		if d := time.Duration(latest.Load()); d > 100*time.Millisecond {
			t.Errorf("an attempt ran until %v", d)
		}
	})
}

// A call that is not safe to repeat (SingleAttempt) or that must not
// overlap (Sequential) is never hedged, however slow; nor a probe.
func TestReview117NoHedgeForSingleOrSequential(t *testing.T) {
	for _, o := range []pipeline.CallOption{pipeline.SingleAttempt(), pipeline.Sequential()} {
		synctest.Test(t, func(t *testing.T) {
			p := pipeline.New(pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(3))),
				pipeline.WithHedging(hedge.New(hedge.Delay(time.Millisecond), hedge.MaxShare(1), hedge.MaxExtra(5))))
			var n atomic.Int64
			pipeline.Do(context.Background(), p, func(ctx context.Context) (int, error) {
				n.Add(1)
				return 1, review117Sleep(ctx, 100*time.Millisecond)
			}, o)
			synctest.Wait()
			if n.Load() != 1 {
				t.Errorf("%T: %d attempts", o, n.Load())
			}
		})
	}
}
