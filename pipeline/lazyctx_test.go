package pipeline

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/hedge"
	"github.com/resiliencekit/resiliencekit/internal/monotime"
	"github.com/resiliencekit/resiliencekit/limit"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

// TestLazyContextAnswersAsWithDeadline: a lazy context, asked in
// every order, answers as context.WithDeadline's would: before and after
// its deadline, its parent's end, and the call's end, whether or not
// anything asked for Done first.
func TestLazyContextAnswersAsWithDeadline(t *testing.T) {
	type key struct{}
	events := []struct {
		name string
		end  func(parentCancel, end func()) // what happens at 1 s
		err  error
	}{
		{"deadline", func(func(), func()) {}, context.DeadlineExceeded},
		{"parent canceled", func(cancel, _ func()) { cancel() }, context.Canceled},
		{"call ended", func(_, end func()) { end() }, context.Canceled},
	}
	for _, ev := range events {
		for _, watched := range []bool{false, true} {
			for _, cause := range []error{nil, ErrAttemptTimeout} {
				t.Run(ev.name, func(t *testing.T) {
					synctest.Test(t, func(t *testing.T) {
						parent, cancel := context.WithCancel(context.WithValue(t.Context(), key{}, "v"))
						defer cancel()
						deadline := time.Now().Add(time.Second)
						if ev.err != context.DeadlineExceeded {
							deadline = deadline.Add(time.Hour) // the event comes first
						}
						bc := newLazyCtx(parent, deadline, cause)
						std, stop := context.WithDeadlineCause(parent, deadline, cause)
						defer stop()
						if watched {
							_ = bc.Done()
						}
						got, _ := bc.Deadline()
						assert.Equal(t, deadline, got)
						sooner, cancelSooner := context.WithTimeout(parent, time.Millisecond)
						got, _ = newLazyCtx(sooner, deadline, cause).Deadline()
						want, _ := sooner.Deadline()
						assert.Equal(t, want, got, "the parent's deadline, which comes first")
						cancelSooner()
						assert.Equal(t, "v", bc.Value(key{}))
						assert.NoError(t, bc.Err())
						assert.NoError(t, context.Cause(bc))

						time.Sleep(time.Second)
						ev.end(cancel, func() { bc.end(); stop() })
						synctest.Wait()
						assert.ErrorIs(t, bc.Err(), ev.err, "watched %v", watched)
						assert.Equal(t, std.Err(), bc.Err())
						assert.Equal(t, context.Cause(std), context.Cause(bc))
						select {
						case <-bc.Done():
						default:
							t.Fatal("Done is not closed once Err is set")
						}
						child, cc := context.WithCancel(bc)
						defer cc()
						assert.Equal(t, ev.err, child.Err(), "a context made from it afterwards")
						assert.Equal(t, "v", bc.Value(key{}))
					})
				})
			}
		}
	}
}

// TestLazyContextEndsWhatWasMadeFromIt: contexts made from a lazy
// context before its end are canceled by it, with no goroutine of their
// own (goleak in TestMain), and Done is one channel to every goroutine.
func TestLazyContextEndsWhatWasMadeFromIt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		bc := newLazyCtx(t.Context(), time.Now().Add(time.Second), nil)
		var wg sync.WaitGroup
		dones := make([]<-chan struct{}, 8)
		for i := range dones {
			wg.Go(func() { dones[i] = bc.Done() })
		}
		wg.Wait()
		for _, d := range dones {
			assert.Equal(t, dones[0], d)
		}
		child, cancel := context.WithTimeoutCause(bc, time.Hour, errors.New("attempt"))
		defer cancel()
		start := time.Now()
		<-child.Done()
		assert.Equal(t, time.Second, time.Since(start))
		assert.ErrorIs(t, child.Err(), context.DeadlineExceeded)
	})
}

// TestLazyContextAllocatesOnceUnwatched: unwatched, a lazy context is one
// allocation; watched, the standard context's, and that one.
func TestLazyContextAllocatesOnceUnwatched(t *testing.T) {
	ctx := context.Background()
	unwatched := testing.AllocsPerRun(100, func() {
		bc := newLazyCtx(ctx, time.Now().Add(time.Second), nil)
		_ = bc.Err()
		bc.end()
	})
	assert.Equal(t, 1.0, unwatched)
	std := testing.AllocsPerRun(100, func() {
		c, cancel := context.WithDeadline(ctx, time.Now().Add(time.Second))
		_ = c.Done()
		cancel()
	})
	watched := testing.AllocsPerRun(100, func() {
		bc := newLazyCtx(ctx, time.Now().Add(time.Second), nil)
		_ = bc.Done()
		bc.end()
	})
	assert.Equal(t, std+1, watched)
	t.Logf("allocations: %v unwatched, %v watched, %v context.WithDeadline", unwatched, watched, std)
}

// newLazyCtx returns parent capped at deadline, which ends it with cause.
func newLazyCtx(parent context.Context, deadline time.Time, cause error) *lazyCtx {
	return lazyAfter(parent, time.Until(deadline), cause)
}

// lazyAfter returns parent capped at d from now, which ends it with cause
// (nil or ErrAttemptTimeout), not fresh.
func lazyAfter(parent context.Context, d time.Duration, cause error) *lazyCtx {
	c := new(lazyCtx)
	c.set(parent, monotime.Now(), d, cause == ErrAttemptTimeout)
	c.stale()
	return c
}

// TestFirstAttemptTimeoutRunsFromTheBudget: the first attempt's timeout
// starts with the budget when nothing waits between them, and from its
// own send after a wait (here a concurrency limit's queue) or for a
// retry; each attempt's context is its own.
func TestFirstAttemptTimeoutRunsFromTheBudget(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var deadlines []time.Time
		var ctxs []context.Context
		op := func(ctx context.Context) (int, error) {
			d, _ := ctx.Deadline()
			deadlines, ctxs = append(deadlines, d), append(ctxs, ctx)
			if len(deadlines) < 3 {
				time.Sleep(10 * time.Millisecond)
				return 0, errors.New("503")
			}
			return 1, nil
		}
		p := New(WithTimeBudget(time.Second), WithAttemptTimeout(100*time.Millisecond),
			WithRetry(retrypolicy.New(retrypolicy.BaseDelay(time.Millisecond), retrypolicy.Jitter(retrypolicy.None))))
		start := time.Now()
		_, err := Do(t.Context(), p, op)
		require.NoError(t, err)
		assert.Equal(t, []time.Time{start.Add(100 * time.Millisecond), start.Add(111 * time.Millisecond), start.Add(123 * time.Millisecond)}, deadlines)
		assert.NotSame(t, ctxs[0], ctxs[1])
		for _, c := range ctxs {
			assert.ErrorIs(t, c.Err(), context.Canceled, "each attempt's context ended with it")
		}

		// A first attempt that waits 50 ms for a slot of the limit.
		queued := New(WithTimeBudget(time.Second), WithAttemptTimeout(100*time.Millisecond),
			WithLimit(limit.NewFixed(1, limit.MaxWaiting(1))))
		start = time.Now()
		go func() {
			_, _ = Do(t.Context(), queued, func(context.Context) (int, error) { time.Sleep(50 * time.Millisecond); return 1, nil })
		}()
		time.Sleep(time.Millisecond)
		var got time.Time
		_, err = Do(t.Context(), queued, func(ctx context.Context) (int, error) { got, _ = ctx.Deadline(); return 1, nil })
		require.NoError(t, err)
		assert.Equal(t, start.Add(150*time.Millisecond), got, "100 ms from its send, after its wait")
	})
}

// TestBudgetAndAttemptTimeoutCostOneAllocation: the README's quick start
// with an attempt timeout (a budget, a breaker, a retry, an attempt
// timeout) costs one allocation a successful call: the two contexts,
// together.
func TestBudgetAndAttemptTimeoutCostOneAllocation(t *testing.T) {
	p := New(WithTimeBudget(2*time.Second), WithBreaker(breaker.New("dep")),
		WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(3))), WithAttemptTimeout(500*time.Millisecond))
	op := func(context.Context) (int, error) { return 1, nil }
	assert.Equal(t, 1.0, testing.AllocsPerRun(100, func() { _, _ = Do(context.Background(), p, op) }))
}

// TestCallerDeadlineAtTheBudgetsEndMakesNoContext: a caller's deadline
// that comes exactly when the budget would end caps the call already.
func TestCallerDeadlineAtTheBudgetsEndMakesNoContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := New(WithTimeBudget(time.Second))
		ctx, cancel := context.WithTimeout(t.Context(), time.Second) // the clock stands still in the bubble
		defer cancel()
		op := func(context.Context) (int, error) { return 1, nil }
		assert.Zero(t, testing.AllocsPerRun(10, func() { _, _ = Do(ctx, p, op) }))
	})
}

// TestLazyContextKeepsTheFirstEnd: ended before its deadline or its
// parent's end, it stays canceled, whatever comes after, as the standard
// context does; asked at once, a deadline and then another end are told
// apart as the standard context tells them.
func TestLazyContextKeepsTheFirstEnd(t *testing.T) {
	errParent := errors.New("parent's cause")
	synctest.Test(t, func(t *testing.T) {
		for _, then := range []string{"deadline", "parent"} {
			parent, cancel := context.WithCancelCause(t.Context())
			lc := newLazyCtx(parent, time.Now().Add(time.Second), nil)
			std, stop := context.WithDeadline(parent, time.Now().Add(time.Second))
			lc.end()
			stop()
			if then == "deadline" {
				time.Sleep(2 * time.Second)
			} else {
				cancel(errParent)
			}
			assert.Equal(t, std.Err(), lc.Err(), then)
			assert.Equal(t, context.Cause(std), context.Cause(lc), then)
			assert.ErrorIs(t, lc.Err(), context.Canceled, then)
			cancel(nil)
		}
	})
}

// TestBudgetsFirstAnswerIsThePipelines: the budget's context answers its
// first Err from the clock reading its deadline was set from; the
// pipeline asks it before anything is sent, so an operation that first
// asks it after the budget ran out hears so, with every stage in front of
// it. A budget too close to its end for that answers from the clock.
func TestBudgetsFirstAnswerIsThePipelines(t *testing.T) {
	configs := []struct {
		name string
		opts []Option
	}{
		{"budget alone", nil},
		{"retry", []Option{WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(1)))}},
		{"breaker", []Option{WithBreaker(breaker.New("b"))}},
		{"breaker and retry", []Option{WithBreaker(breaker.New("b")), WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(1)))}},
		{"waiting for the breaker", []Option{WithBreaker(breaker.New("b")), WaitWhenOpen()}},
		{"limit", []Option{WithLimit(limit.NewFixed(1))}},
		{"single attempt with hedging", []Option{WithRetry(retrypolicy.New()), WithHedging(hedge.New(hedge.Delay(time.Hour)))}},
	}
	for _, cfg := range configs {
		t.Run(cfg.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				p := New(append(cfg.opts, WithTimeBudget(10*time.Millisecond))...)
				_, err := Do(t.Context(), p, func(ctx context.Context) (int, error) {
					time.Sleep(20 * time.Millisecond)
					return 0, ctx.Err() // the first question the operation asks
				})
				assert.ErrorIs(t, err, context.DeadlineExceeded)
			})
		})
	}
	t.Run("fresh only far from its end", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			now := monotime.Now()
			far, near := new(lazyCtx), new(lazyCtx)
			far.set(t.Context(), now, freshMargin, false)
			near.set(t.Context(), now, freshMargin-1, false)
			time.Sleep(time.Hour)
			assert.NoError(t, far.Err(), "the first answer, from the reading")
			assert.ErrorIs(t, far.Err(), context.DeadlineExceeded, "the next, from the clock")
			assert.ErrorIs(t, near.Err(), context.DeadlineExceeded)
		})
	})
	t.Run("asked anything else first", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			for _, ask := range []func(*lazyCtx){
				func(c *lazyCtx) { c.Value("k") },
				func(c *lazyCtx) { c.Deadline() },
				func(c *lazyCtx) { c.Done() },
			} {
				c := new(lazyCtx)
				c.set(t.Context(), monotime.Now(), time.Second, false)
				ask(c)
				time.Sleep(2 * time.Second)
				assert.ErrorIs(t, c.Err(), context.DeadlineExceeded)
			}
		})
	})
}

// TestAttemptEndsWithoutReadingTheClock: an attempt's context that ends
// asks its parent, the budget's, whether it ended first without reading
// the clock: a budget's deadline that passed unseen is not seen there
// either, so the attempt reports Canceled, as for its own deadline (the
// lazy context's documented difference); one the budget saw is seen.
func TestAttemptEndsWithoutReadingTheClock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		budget := lazyAfter(t.Context(), time.Second, nil)
		unseen := lazyAfter(budget, time.Hour, ErrAttemptTimeout)
		time.Sleep(2 * time.Second)
		unseen.end()
		assert.ErrorIs(t, unseen.Err(), context.Canceled)

		seen := lazyAfter(budget, time.Hour, ErrAttemptTimeout)
		require.ErrorIs(t, budget.Err(), context.DeadlineExceeded)
		seen.end()
		assert.ErrorIs(t, seen.Err(), context.DeadlineExceeded)

		ended := lazyAfter(t.Context(), time.Hour, nil)
		child := lazyAfter(ended, time.Hour, nil)
		ended.end()
		child.end()
		assert.ErrorIs(t, child.Err(), context.Canceled)
	})
}

// A lazy context names itself, with its deadline if it has one, as
// context.WithDeadline's does.
func TestLazyContextString(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := lazyAfter(t.Context(), time.Second, nil)
		assert.Equal(t, "pipeline.lazyCtx("+time.Now().Add(time.Second).String()+")", c.String())
		assert.Equal(t, "pipeline.lazyCtx", (&lazyCtx{Context: t.Context()}).String())
	})
}
