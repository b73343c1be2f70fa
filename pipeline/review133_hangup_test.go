package pipeline_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/hedge"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/resilience"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

var errReadClosed = errors.New("read: connection closed") // what a client reading a body returns when its context's cancellation closes the connection

// slowHealthy is a healthy dependency that answers in 300 ms. An attempt
// that its context cancels returns ctx.Err() while it waits for the
// answer's headers (its first 50 ms), and errReadClosed once it reads the
// body: an error the cancellation caused, not the dependency's answer.
func slowHealthy(ctx context.Context) (*int, error) {
	start := time.Now()
	res := new(int)
	select {
	case <-time.After(300 * time.Millisecond):
		return res, nil
	case <-ctx.Done():
		if time.Since(start) > 50*time.Millisecond {
			return res, errReadClosed
		}
		return res, ctx.Err()
	}
}

// review133HangUp runs one call through p whose caller hangs up at 130 ms,
// and returns its error and the breaker's counts.
func review133HangUp(t *testing.T, hedged bool, discards *atomic.Int32) (error, resilience.State) {
	b := breaker.New("dep", breaker.ConsecutiveFailures(1))
	opts := []pipeline.Option{
		pipeline.WithBreaker(b),
		pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(3), retrypolicy.BaseDelay(10*time.Millisecond))),
	}
	if hedged {
		opts = append(opts, pipeline.WithHedging(hedge.New(hedge.Delay(100*time.Millisecond))))
	}
	p := pipeline.New(opts...)
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(130*time.Millisecond, cancel)
	var copts []pipeline.CallOption
	if discards != nil {
		copts = append(copts, pipeline.Discard(func(*int) { discards.Add(1) }))
	}
	_, err := pipeline.Do(ctx, p, slowHealthy, copts...)
	synctest.Wait()
	return err, b.State() // ConsecutiveFailures(1): open once a failure counted (its counts then cleared)
}

// A caller hangs up on a healthy, slow dependency. Without hedging the
// breaker leaves the call out, whatever error the cancellation made the
// attempt return (retrypolicy: "whatever err is, not the dependency's
// answer"). With hedging it must too: the first attempt's errReadClosed
// came after, and of, the cancellation.
func TestReview133HedgedHangUpCancelCausedErrorIsNoAnswer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		err, n := review133HangUp(t, false, nil)
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("unhedged: err = %v, want context.Canceled", err)
		}
		if n != resilience.StateClosed {
			t.Fatalf("unhedged: a hang-up on a healthy dependency counted as a failure: breaker %v", n)
		}
		err, n = review133HangUp(t, true, nil)
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("hedged: err = %v, want context.Canceled", err)
		}
		if n != resilience.StateClosed {
			t.Errorf("hedged: a hang-up on a healthy dependency counted as a failure (the breaker, ConsecutiveFailures(1), is %v), err %v", n, err)
		}
	})
}

// Every result not returned is discarded once, the answered race's too.
func TestReview133HedgedHangUpDiscardOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var discards atomic.Int32
		err, _ := review133HangUp(t, true, &discards)
		if !errors.Is(err, context.Canceled) || errors.Is(err, errReadClosed) {
			t.Fatalf("err = %v: the caller's error must match context.Canceled only", err)
		}
		if got := discards.Load(); got != 1 {
			t.Errorf("Discard called %d times for 2 attempts, one returned; want 1", got)
		}
	})
}

// A pipeline with hedging and no retry stage: the first attempt failed
// (503, slowly) while its hedge was out, then the caller hung up. The
// breaker's doc: such a call "counts by that answer ... (with hedging
// too: a race keeps the failed attempt's answer as its hedges come back
// canceled)".
func TestReview133HedgedNoRetryHangUpAfterFailureCounts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := breaker.New("dep", breaker.ConsecutiveFailures(1))
		p := pipeline.New(pipeline.WithBreaker(b), pipeline.WithHedging(hedge.New(hedge.Delay(100*time.Millisecond))))
		var n atomic.Int32
		op := func(ctx context.Context) (int, error) {
			if n.Add(1) == 1 {
				time.Sleep(150 * time.Millisecond)
				return 0, errors.New("503 service unavailable")
			}
			<-ctx.Done()
			return 0, ctx.Err()
		}
		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(200*time.Millisecond, cancel)
		_, err := pipeline.Do(ctx, p, op)
		synctest.Wait()
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("err = %v", err)
		}
		if b.State() != resilience.StateOpen {
			t.Errorf("a hung-up hedged call whose attempt failed: breaker %v, counts %+v, want the failure counted (ConsecutiveFailures(1))", b.State(), b.Counts())
		}
	})
}

// A dependency that hangs opens the breaker through calls with budgets
// long enough, with retries and hedging, with and without an attempt
// timeout, and without a retry stage.
func TestReview133HangOpensBreaker(t *testing.T) {
	hang := func(ctx context.Context) (int, error) { <-ctx.Done(); return 0, ctx.Err() }
	for _, tc := range []struct {
		name string
		opts []pipeline.Option
	}{
		{"retry+hedge", []pipeline.Option{pipeline.WithRetry(retrypolicy.New()), pipeline.WithHedging(hedge.New(hedge.Delay(100 * time.Millisecond)))}},
		{"retry+hedge+attempt", []pipeline.Option{pipeline.WithRetry(retrypolicy.New()), pipeline.WithHedging(hedge.New(hedge.Delay(100 * time.Millisecond))), pipeline.WithAttemptTimeout(400 * time.Millisecond)}},
		{"hedge", []pipeline.Option{pipeline.WithHedging(hedge.New(hedge.Delay(100 * time.Millisecond)))}},
		{"retry", []pipeline.Option{pipeline.WithRetry(retrypolicy.New())}},
		{"retry+budget", []pipeline.Option{pipeline.WithRetry(retrypolicy.New()), pipeline.WithTimeBudget(time.Second)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				b := breaker.New("dep", breaker.ConsecutiveFailures(3))
				p := pipeline.New(append(tc.opts, pipeline.WithBreaker(b))...)
				for range 3 {
					ctx, cancel := context.WithTimeout(context.Background(), time.Second)
					_, err := pipeline.Do(ctx, p, hang)
					cancel()
					if !errors.Is(err, context.DeadlineExceeded) {
						t.Fatalf("err = %v", err)
					}
				}
				synctest.Wait()
				if b.State() != resilience.StateOpen {
					t.Errorf("3 calls of 1 s to a dependency that hangs: breaker %v, counts %+v", b.State(), b.Counts())
				}
			})
		})
	}
}
