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
	"github.com/resiliencekit/resiliencekit/limit"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/resilience"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

func review57Wait(ctx context.Context, d time.Duration) error {
	select {
	case <-time.After(d):
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// The caller's errors never shrink an adaptive limit: bad requests,
// cancellations, the caller's own short deadlines (the operation returning
// ctx.Err() or wrapping it), panics, runtime.Goexit. The pipeline's own
// limits (budget, attempt timeout) and dependency failures do.
func TestReview57AIMDLearnsOnlyFromTheDependency(t *testing.T) {
	type cs struct {
		name     string
		budget   time.Duration
		attempt  time.Duration
		ctx      func() (context.Context, context.CancelFunc)
		op       func(ctx context.Context) (int, error)
		decrease bool
	}
	bg := func() (context.Context, context.CancelFunc) { return context.WithCancel(context.Background()) }
	short := func() (context.Context, context.CancelFunc) {
		return context.WithTimeout(context.Background(), 5*time.Millisecond)
	}
	slow := func(ctx context.Context) (int, error) { return 0, review57Wait(ctx, time.Second) }
	for _, c := range []cs{
		{name: "permanent", ctx: bg, op: func(context.Context) (int, error) {
			return 0, resilience.Permanent(errors.New("400"))
		}},
		{name: "rejected-by-client", ctx: bg, op: func(context.Context) (int, error) {
			return 0, resilience.Rejected(errors.New("bad url"))
		}},
		{name: "caller-deadline", ctx: short, op: slow},
		{name: "caller-deadline-wrapped", ctx: short, op: func(ctx context.Context) (int, error) {
			err := review57Wait(ctx, time.Second)
			return 0, errors.Join(errors.New("driver: query aborted"), err)
		}},
		{name: "caller-deadline-with-longer-budget", budget: time.Second, ctx: short, op: slow},
		{name: "caller-deadline-with-longer-attempt-timeout", attempt: time.Second, ctx: short, op: slow},
		{name: "caller-cancel", ctx: func() (context.Context, context.CancelFunc) {
			ctx, cancel := context.WithCancel(context.Background())
			time.AfterFunc(3*time.Millisecond, cancel)
			return ctx, cancel
		}, op: slow},
		{name: "panic", ctx: bg, op: func(context.Context) (int, error) { panic("bug") }},
		{name: "transient", ctx: bg, op: func(context.Context) (int, error) { return 0, errors.New("503") }, decrease: true},
		{name: "terminal", ctx: bg, op: func(context.Context) (int, error) { return 0, resilience.Terminal(errors.New("500")) }, decrease: true},
		{name: "budget", budget: 5 * time.Millisecond, ctx: bg, op: slow, decrease: true},
		{name: "attempt-timeout", attempt: 5 * time.Millisecond, ctx: bg, op: slow, decrease: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				l := limit.NewAIMD(limit.Initial(40), limit.Max(40))
				opts := []pipeline.Option{pipeline.WithLimit(l),
					pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(3), retrypolicy.BaseDelay(time.Millisecond)))}
				if c.budget > 0 {
					opts = append(opts, pipeline.WithTimeBudget(c.budget))
				}
				if c.attempt > 0 {
					opts = append(opts, pipeline.WithAttemptTimeout(c.attempt))
				}
				p := pipeline.New(opts...)
				var wg sync.WaitGroup
				for i := 0; i < 30; i++ {
					wg.Add(1)
					go func() {
						defer wg.Done()
						defer func() { _ = recover() }()
						ctx, cancel := c.ctx()
						defer cancel()
						_, _ = pipeline.Do(ctx, p, c.op)
					}()
				}
				wg.Wait()
				got := l.Limit()
				if c.decrease != (got < 40) {
					t.Errorf("%s: limit %d after 30 calls at once (from 40); want decrease=%v", c.name, got, c.decrease)
				}
				if l.InFlight() != 0 {
					t.Errorf("in flight %d", l.InFlight())
				}
			})
		})
	}
}

// After an outage (every attempt fails) the limit falls to its minimum; once
// the dependency is healthy again it must come back within a few round
// trips (slow start: doubling each round trip).
func TestReview57AIMDRecoversAfterOutage(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := limit.NewAIMD(limit.Initial(100), limit.Max(200))
		p := pipeline.New(pipeline.WithLimit(l))
		var healthy atomic.Bool
		const rtt = 10 * time.Millisecond
		op := func(ctx context.Context) (int, error) {
			if err := review57Wait(ctx, rtt); err != nil {
				return 0, err
			}
			if !healthy.Load() {
				return 0, errors.New("503")
			}
			return 1, nil
		}
		stop := make(chan struct{})
		var wg sync.WaitGroup
		var okCalls, refused atomic.Int64
		for i := 0; i < 150; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					select {
					case <-stop:
						return
					default:
					}
					_, err := pipeline.Do(context.Background(), p, op)
					switch {
					case err == nil:
						okCalls.Add(1)
					case errors.Is(err, limit.ErrLimited):
						refused.Add(1)
						time.Sleep(rtt)
					}
				}
			}()
		}
		time.Sleep(time.Second)
		low := l.Limit()
		healthy.Store(true)
		start := time.Now()
		var reached time.Duration
		for time.Since(start) < 5*time.Second {
			time.Sleep(time.Millisecond)
			if l.Limit() >= 140 && reached == 0 {
				reached = time.Since(start)
			}
		}
		close(stop)
		wg.Wait()
		t.Logf("outage: limit fell to %d; healthy again: limit >= 140 (150 callers) after %v; limit at end %d; ok %d refused %d",
			low, reached, l.Limit(), okCalls.Load(), refused.Load())
		if low > 2 {
			t.Errorf("a full outage left the limit at %d", low)
		}
		if reached == 0 || reached > 30*rtt {
			t.Errorf("the limit took %v (0: never) to come back to the load after the outage", reached)
		}
	})
}

// A refused attempt is not retried, is not counted by the breaker, and
// matches limit.ErrLimited, however many are refused.
func TestReview57RefusalsAreNotRetriedNorCounted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := limit.NewFixed(1)
		var limited atomic.Int64
		b := breaker.New("r57-refusals", breaker.ConsecutiveFailures(3))
		p := pipeline.New(pipeline.WithBreaker(b),
			pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(0), retrypolicy.BaseDelay(0))),
			pipeline.WithTimeBudget(time.Second),
			pipeline.WithLimit(l),
			pipeline.WithListener(resilience.ListenerFunc(func(e resilience.Event) {
				if e.Kind == resilience.EventLimited {
					limited.Add(1)
				}
			})))
		hold := make(chan struct{})
		done := make(chan struct{})
		go func() {
			defer close(done)
			_, _ = pipeline.Do(context.Background(), p, func(context.Context) (int, error) { <-hold; return 1, nil })
		}()
		synctest.Wait()
		var calls atomic.Int64
		for i := 0; i < 1000; i++ {
			_, err := pipeline.Do(context.Background(), p, func(context.Context) (int, error) { calls.Add(1); return 1, nil })
			if !errors.Is(err, limit.ErrLimited) {
				t.Fatalf("call %d: %v", i, err)
			}
			if resilience.Classify(err) != resilience.ClassRejected {
				t.Fatalf("class %v", resilience.Classify(err))
			}
		}
		close(hold)
		<-done
		if limited.Load() != 1000 || calls.Load() != 0 {
			t.Errorf("1000 refused calls: %d refusals told, %d operations ran", limited.Load(), calls.Load())
		}
		if b.State() != resilience.StateClosed {
			t.Errorf("breaker %v after refusals", b.State())
		}
	})
}

// With a RetryIf that retries every error but the caller's (a common
// policy), a limit refusal is retried back to back until the budget ends:
// a storm of refusals against a full limiter.
func TestReview57RetryIfRetriesRefusals(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := limit.NewFixed(1)
		var limited atomic.Int64
		p := pipeline.New(
			pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(0), retrypolicy.BaseDelay(time.Millisecond),
				retrypolicy.MaxDelay(time.Millisecond),
				retrypolicy.RetryIf(func(err error) bool { return !errors.Is(err, context.Canceled) }))),
			pipeline.WithTimeBudget(time.Second),
			pipeline.WithLimit(l),
			pipeline.WithListener(resilience.ListenerFunc(func(e resilience.Event) {
				if e.Kind == resilience.EventLimited {
					limited.Add(1)
				}
			})))
		hold := make(chan struct{})
		go func() {
			_, _ = pipeline.Do(context.Background(), p, func(context.Context) (int, error) { <-hold; return 1, nil })
		}()
		synctest.Wait()
		_, err := pipeline.Do(context.Background(), p, func(context.Context) (int, error) { return 1, nil })
		close(hold)
		t.Logf("one call against a full limit: %d refusals, err %v", limited.Load(), err)
		if limited.Load() > 1 {
			t.Errorf("a limit refusal was retried %d times (docs: refusals of class rejected are not retried)", limited.Load()-1)
		}
	})
}
