package pipeline_test

// review169: "do no harm" at the pipeline, with the README's quick-start
// configuration, in fake time.

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/resilience"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

func review169QS(b *breaker.Breaker) *pipeline.Pipeline {
	return pipeline.New(
		pipeline.WithTimeBudget(2*time.Second),
		pipeline.WithBreaker(b),
		pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(3))),
	)
}

// A healthy dependency that answers in 300 ms; callers upstream whose
// own deadline is 150 ms (their choice) time out. The README: "a caller's
// cancellation is neither"; docs/retries.md: "A caller's budget too short
// is the caller's doing". After them, a caller with time enough must get
// its answer, not ErrOpen.
func TestReview169_ShortCallerDeadlinesColdBreaker(t *testing.T) {
	for _, callerDL := range []time.Duration{50 * time.Millisecond, 99 * time.Millisecond, 150 * time.Millisecond, 250 * time.Millisecond} {
		t.Run(callerDL.String(), func(t *testing.T) {
			if callerDL >= 100*time.Millisecond {
				t.Skip("known limit (docs/retries.md, deadlines: a call of 100 ms or more that its deadline ended counts while the breaker has timed no answer): no answer tells a slow dependency from a hanging one")
			}
			synctest.Test(t, func(t *testing.T) {
				b := breaker.New("review169-cold")
				p := review169QS(b)
				op := func(ctx context.Context) (int, error) {
					select {
					case <-time.After(300 * time.Millisecond):
						return 1, nil
					case <-ctx.Done():
						return 0, ctx.Err()
					}
				}
				for range 10 {
					ctx, cancel := context.WithTimeout(context.Background(), callerDL)
					_, err := pipeline.Do(ctx, p, op)
					cancel()
					if err == nil {
						t.Fatalf("a %v call got an answer that takes 300ms", callerDL)
					}
					if !errors.Is(err, retrypolicy.ErrOutOfTime) && !errors.Is(err, breaker.ErrOpen) {
						t.Errorf("caller deadline %v: err %v does not match ErrOutOfTime (README: the caller's deadline ran out)", callerDL, err)
					}
					time.Sleep(10 * time.Millisecond)
				}
				if st := b.State(); st != resilience.StateClosed {
					t.Errorf("caller deadline %v against a healthy 300ms dependency, no answer timed yet: breaker %v", callerDL, st)
				}
				if _, err := pipeline.Do(context.Background(), p, op); err != nil {
					t.Errorf("caller deadline %v: then a caller with 2s got %v", callerDL, err)
				}
			})
		})
	}
}

// The same after the dependency's answers were timed (a warm breaker),
// and after more than the documented minute of only short callers.
func TestReview169_ShortCallerDeadlinesWarmBreaker(t *testing.T) {
	for _, gap := range []time.Duration{0, 90 * time.Second} {
		t.Run(gap.String(), func(t *testing.T) {
			if gap > 80*time.Second {
				t.Skip("known limit (docs/retries.md, deadlines: once the slowest answer timed is over 80 s old, every call of 100 ms or more counts)")
			}
			synctest.Test(t, func(t *testing.T) {
				b := breaker.New("review169-warm")
				p := review169QS(b)
				op := func(ctx context.Context) (int, error) {
					select {
					case <-time.After(300 * time.Millisecond):
						return 1, nil
					case <-ctx.Done():
						return 0, ctx.Err()
					}
				}
				if _, err := pipeline.Do(context.Background(), p, op); err != nil {
					t.Fatal(err)
				}
				time.Sleep(gap)
				for range 10 {
					ctx, cancel := context.WithTimeout(context.Background(), 150*time.Millisecond)
					pipeline.Do(ctx, p, op)
					cancel()
					time.Sleep(10 * time.Millisecond)
				}
				if st := b.State(); st != resilience.StateClosed {
					t.Errorf("gap %v: 150ms callers against a healthy 300ms dependency opened the breaker: %v", gap, st)
				}
			})
		})
	}
}

// Canceled callers: never a failure, and errors.Is(err, context.Canceled).
func TestReview169_CanceledCallers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := breaker.New("review169-cancel")
		p := review169QS(b)
		op := func(ctx context.Context) (int, error) {
			select {
			case <-time.After(300 * time.Millisecond):
				return 1, nil
			case <-ctx.Done():
				return 0, ctx.Err()
			}
		}
		for _, after := range []time.Duration{0, time.Millisecond, 100 * time.Millisecond, 299 * time.Millisecond} {
			for range 6 {
				ctx, cancel := context.WithCancel(context.Background())
				if after == 0 {
					cancel()
				} else {
					time.AfterFunc(after, cancel)
				}
				_, err := pipeline.Do(ctx, p, op)
				cancel()
				if !errors.Is(err, context.Canceled) || errors.Is(err, retrypolicy.ErrOutOfTime) {
					t.Errorf("canceled after %v: %v", after, err)
				}
			}
		}
		if st := b.State(); st != resilience.StateClosed {
			t.Errorf("breaker %v after canceled callers", st)
		}
	})
}

// A Retry-After longer than what is left: "No delay is slept that would
// end past it; the last error comes back at once instead" — for the
// budget, and for the caller's own deadline, with and without a budget.
func TestReview169_RetryAfterPastDeadline(t *testing.T) {
	for _, tc := range []struct {
		name     string
		p        *pipeline.Pipeline
		callerDL time.Duration
	}{
		{"quickstart budget", review169QS(breaker.New("x")), 0},
		{"quickstart, caller 1s", review169QS(breaker.New("y")), time.Second},
		{"retry only, caller 2s", pipeline.New(pipeline.WithRetry(retrypolicy.New())), 2 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ctx := context.Background()
				if tc.callerDL > 0 {
					var cancel context.CancelFunc
					ctx, cancel = context.WithTimeout(ctx, tc.callerDL)
					defer cancel()
				}
				calls := 0
				start := time.Now()
				_, err := pipeline.Do(ctx, tc.p, func(ctx context.Context) (int, error) {
					calls++
					return 0, resilience.RetryAfter(errors.New("503"), 5*time.Second)
				})
				if el := time.Since(start); el != 0 || calls != 1 {
					t.Errorf("%s: returned after %v and %d calls, want at once after 1: %v", tc.name, el, calls, err)
				}
				if err == nil || err.Error() == "" {
					t.Errorf("%s: no error", tc.name)
				}
			})
		})
	}
}
