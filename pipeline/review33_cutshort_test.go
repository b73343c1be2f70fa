package pipeline_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/hedge"
	"github.com/resiliencekit/resiliencekit/limit"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/resilience"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
	"github.com/resiliencekit/resiliencekit/throttle"
)

func r33hang(ctx context.Context) (int, error) {
	<-ctx.Done()
	return 0, ctx.Err()
}

// The pipeline's own time budget is not the caller's deadline: the
// package doc of breaker leaves out "a call that its context's deadline
// ended (the caller's, or a budget an upstream sent)", and the gates
// learn from the time budget. Without WaitWhenOpen the budget is set
// inside the breaker, which then sees no deadline and counts the hung
// calls; with WaitWhenOpen it is set outside, the breaker takes it for
// the caller's, and a dependency that hangs from the start is never
// counted under a budget below 100 ms.
func TestReview33OwnBudgetWithWaitWhenOpenHidesHang(t *testing.T) {
	for _, wait := range []bool{false, true} {
		name := "plain"
		if wait {
			name = "WaitWhenOpen"
		}
		t.Run(name, func(t *testing.T) {
			b := breaker.New("dep")
			opts := []pipeline.Option{pipeline.WithBreaker(b), pipeline.WithTimeBudget(50 * time.Millisecond)}
			if wait {
				opts = append(opts, pipeline.WaitWhenOpen())
			}
			p := pipeline.New(opts...)
			for i := range 20 {
				_, err := pipeline.Do(context.Background(), p, r33hang)
				require.Error(t, err)
				if b.State() != resilience.StateClosed {
					t.Logf("opened after %d calls", i+1)
					return
				}
			}
			assert.Fail(t, "20 calls hung through their pipeline's own 50 ms budget and the breaker stayed closed", "counts %+v", b.Counts())
		})
	}
}

// With WaitWhenOpen, a probe that a call which waited makes is left out
// whenever its deadline ends it (waitedOut), whatever time it had: a
// dependency that hangs, which answered in 30 ms before, keeps the
// breaker half-open, and every call waits its whole budget, instead of
// the breaker going back to open on the failed probe.
func TestReview33WaitWhenOpenHungProbesNeverReopen(t *testing.T) {
	var opens atomic.Int64
	b := breaker.New("dep", breaker.WithListener(resilience.ListenerFunc(func(e resilience.Event) {
		if e.Kind == resilience.EventStateChange && e.To == resilience.StateOpen {
			opens.Add(1)
		}
	})))
	p := pipeline.New(pipeline.WithBreaker(b), pipeline.WaitWhenOpen())
	_, err := pipeline.Do(context.Background(), p, answerIn(30*time.Millisecond))
	require.NoError(t, err)

	var sent, probesLeftOut atomic.Int64
	hang := func(ctx context.Context) (int, error) {
		sent.Add(1)
		return r33hang(ctx)
	}
	stop := time.Now().Add(3 * time.Second)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for time.Now().Before(stop) {
				ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
				_, _ = pipeline.Do(ctx, p, hang)
				cancel()
			}
		})
	}
	wg.Wait()
	c := b.Counts()
	probesLeftOut.Store(int64(c.TotalExclusions))
	t.Logf("attempts sent %d, opened %d times, state %v, counts %+v", sent.Load(), opens.Load(), b.State(), c)
	// The dependency hung for 3 s with 300 ms budgets against a 30 ms
	// answer: every probe had 10 times its slowest answer. A breaker that
	// goes back to open on a failed probe opens about every 300 ms.
	assert.GreaterOrEqual(t, opens.Load(), int64(3), "a hung dependency kept a WaitWhenOpen breaker half-open: the probes' timeouts were left out")
}

// r33listener counts the gates' refusals.
type r33count struct{ throttled, limited atomic.Int64 }

func (c *r33count) OnEvent(e resilience.Event) {
	switch e.Kind {
	case resilience.EventThrottled:
		c.throttled.Add(1)
	case resilience.EventLimited:
		c.limited.Add(1)
	}
}

// Many callers with 5 ms budgets, hedged and retried, against a healthy
// dependency answering in 30 ms: neither the throttle nor the adaptive
// limit nor a cold breaker may learn anything from them, and an ordinary
// call must then go through untouched.
func TestReview33GatesIgnoreCallerBudgets(t *testing.T) {
	th := throttle.New()
	lim := limit.NewAIMD(limit.Initial(8), limit.Min(1), limit.Max(64))
	b := breaker.New("dep")
	cnt := &r33count{}
	p := pipeline.New(pipeline.WithBreaker(b), pipeline.WithThrottle(th), pipeline.WithLimit(lim),
		pipeline.WithHedging(hedge.New(hedge.Delay(time.Millisecond))),
		pipeline.WithRetry(retrypolicy.New(retrypolicy.BaseDelay(time.Millisecond))),
		pipeline.WithListener(cnt))
	before := lim.Limit()
	stop := time.Now().Add(time.Second)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for time.Now().Before(stop) {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Millisecond)
				_, _ = pipeline.Do(ctx, p, answerIn(30*time.Millisecond))
				cancel()
			}
		})
	}
	wg.Wait()
	t.Logf("limit %d -> %d, throttle p %.3f, throttled %d, limited %d, breaker %v %+v",
		before, lim.Limit(), th.RejectProbability(), cnt.throttled.Load(), cnt.limited.Load(), b.State(), b.Counts())
	assert.GreaterOrEqual(t, lim.Limit(), before, "the adaptive limit shrank on callers' budgets")
	assert.Zero(t, th.RejectProbability())
	assert.Equal(t, resilience.StateClosed, b.State())
	_, err := pipeline.Do(context.Background(), p, answerIn(30*time.Millisecond))
	assert.NoError(t, err)
}

// r33tooMany is a dependency's "slow down" answer that the service has
// its breaker ignore (IgnoreIf): retryable, not a failure of health.
var r33tooMany = errors.New("429 too many requests")

// A call whose first attempt got an answer the breaker ignores (IgnoreIf)
// and whose retry the caller's 20 ms budget cut (the dependency answers in
// 30 ms): neither attempt says anything against the dependency, and the
// call is counted by the answer before the cut, left out (review132; it
// counted, "ran more than once", and five such calls opened the breaker
// against a dependency that answers every other call).
func TestReview33IgnoredThenCutRetryCounts(t *testing.T) {
	b := breaker.New("dep", breaker.IgnoreIf(func(err error) bool { return errors.Is(err, r33tooMany) }))
	p := pipeline.New(pipeline.WithBreaker(b),
		pipeline.WithRetry(retrypolicy.New(retrypolicy.BaseDelay(time.Millisecond), retrypolicy.MaxAttempts(3))))
	for range 5 {
		var n atomic.Int64
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		_, err := pipeline.Do(ctx, p, func(ctx context.Context) (int, error) {
			if n.Add(1) == 1 {
				return 0, r33tooMany
			}
			return answerIn(30 * time.Millisecond)(ctx)
		})
		cancel()
		require.Error(t, err)
		require.False(t, breaker.IsRejection(err), "rejected: %v", err)
	}
	_, err := pipeline.Do(context.Background(), p, answerIn(30*time.Millisecond))
	assert.NoError(t, err, "counts %+v", b.Counts())
	assert.Zero(t, b.Counts().TotalFailures)
}
