package pipeline_test

import (
	"context"
	"sync/atomic"
	"testing"
	"testing/synctest"
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

// spans is a tracer that counts the calls and attempts it is shown.
type spans struct{ calls, attempts atomic.Int64 }

func (s *spans) StartCall(ctx context.Context, _ string) (context.Context, resilience.CallTrace) {
	s.calls.Add(1)
	return ctx, s
}

func (s *spans) StartAttempt(ctx context.Context, _ resilience.AttemptInfo) (context.Context, func(error)) {
	s.attempts.Add(1)
	return ctx, func(error) {}
}

func (*spans) End(error) {}

// TestEachOptionAloneRunsItsStage builds a pipeline of one option (or of
// the one option a stage needs beside it) and shows, from outside, that
// its stage ran: a stage that is the only one of its kind is not skipped.
// Hedging and WaitWhenOpen have tests of their own below.
func TestEachOptionAloneRunsItsStage(t *testing.T) {
	tests := []struct {
		name string
		// stage returns the option and a check run after calls, each
		// failing with errDown while fail says so.
		stage func(t *testing.T) (pipeline.Option, func(t *testing.T, run func(fail bool) (calls int64, err error)))
	}{
		{"WithBreaker", func(t *testing.T) (pipeline.Option, func(*testing.T, func(bool) (int64, error))) {
			b := breaker.New("dep", breaker.ConsecutiveFailures(1))
			return pipeline.WithBreaker(b), func(t *testing.T, run func(bool) (int64, error)) {
				_, _ = run(true)
				calls, err := run(false)
				require.ErrorIs(t, err, breaker.ErrOpen)
				assert.Zero(t, calls, "the open breaker made no call")
			}
		}},
		{"WithRetry", func(t *testing.T) (pipeline.Option, func(*testing.T, func(bool) (int64, error))) {
			return pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(3), retrypolicy.BaseDelay(0))), func(t *testing.T, run func(bool) (int64, error)) {
				calls, err := run(true)
				require.ErrorIs(t, err, retrypolicy.ErrMaxAttempts)
				assert.EqualValues(t, 3, calls)
			}
		}},
		{"WithTimeBudget", deadlineWithin(pipeline.WithTimeBudget(time.Second), time.Second)},
		{"WithAttemptTimeout", deadlineWithin(pipeline.WithAttemptTimeout(time.Second), time.Second)},
		{"WithListener", func(t *testing.T) (pipeline.Option, func(*testing.T, func(bool) (int64, error))) {
			rec := &recorder{}
			return pipeline.WithListener(rec), func(t *testing.T, run func(bool) (int64, error)) {
				_, _ = run(false)
				assert.Equal(t, []string{" attempt 1 ok=true", " call_done 0s ok=true"}, rec.take())
			}
		}},
		{"WithTracer", func(t *testing.T) (pipeline.Option, func(*testing.T, func(bool) (int64, error))) {
			s := &spans{}
			return pipeline.WithTracer(s), func(t *testing.T, run func(bool) (int64, error)) {
				_, _ = run(false)
				assert.EqualValues(t, 1, s.calls.Load())
				assert.EqualValues(t, 1, s.attempts.Load())
			}
		}},
		{"WithThrottle", func(t *testing.T) (pipeline.Option, func(*testing.T, func(bool) (int64, error))) {
			th := throttle.New()
			return pipeline.WithThrottle(th), func(t *testing.T, run func(bool) (int64, error)) {
				for range 20 {
					_, _ = run(true)
				}
				assert.Positive(t, th.RejectProbability(), "the throttle counted the failures")
			}
		}},
		{"WithLimit", func(t *testing.T) (pipeline.Option, func(*testing.T, func(bool) (int64, error))) {
			l := limit.NewFixed(1)
			return pipeline.WithLimit(l), func(t *testing.T, run func(bool) (int64, error)) {
				var inFlight int
				_, _ = run(false)
				inFlight = l.InFlight()
				assert.Zero(t, inFlight, "the slot was given back")
				calls, err := run(false)
				require.NoError(t, err)
				assert.EqualValues(t, 1, calls)
				tk, err := l.Acquire(t.Context())
				require.NoError(t, err)
				_, err = run(false)
				require.ErrorIs(t, err, limit.ErrLimited, "the full limit refused the attempt")
				l.Release(tk, nil)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				opt, check := tt.stage(t)
				p := pipeline.New(opt)
				check(t, func(fail bool) (int64, error) {
					var calls atomic.Int64
					_, err := pipeline.Do(t.Context(), p, func(ctx context.Context) (int, error) {
						calls.Add(1)
						if fail {
							return 0, errDown
						}
						return 1, nil
					})
					return calls.Load(), err
				})
			})
		})
	}
}

// deadlineWithin checks that a pipeline of opt alone gives the operation a
// deadline d away.
func deadlineWithin(opt pipeline.Option, d time.Duration) func(*testing.T) (pipeline.Option, func(*testing.T, func(bool) (int64, error))) {
	return func(t *testing.T) (pipeline.Option, func(*testing.T, func(bool) (int64, error))) {
		return opt, func(t *testing.T, _ func(bool) (int64, error)) {
			start := time.Now()
			_, err := pipeline.Do(t.Context(), pipeline.New(opt), func(ctx context.Context) (int, error) {
				deadline, ok := ctx.Deadline()
				require.True(t, ok, "the operation sees a deadline")
				assert.Equal(t, start.Add(d), deadline)
				return 1, nil
			})
			require.NoError(t, err)
		}
	}
}

func TestHedgingAloneSendsAHedge(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := pipeline.New(pipeline.WithHedging(hedge.New(hedge.Delay(10 * time.Millisecond))))
		var calls atomic.Int64
		start := time.Now()
		got, err := pipeline.Do(t.Context(), p, func(ctx context.Context) (int64, error) {
			n := calls.Add(1)
			if n == 1 {
				<-ctx.Done() // slow: the hedge wins
				return 0, ctx.Err()
			}
			return n, nil
		})
		require.NoError(t, err)
		assert.EqualValues(t, 2, got, "the hedge answered")
		assert.Equal(t, 10*time.Millisecond, time.Since(start))
		synctest.Wait()
		assert.EqualValues(t, 2, calls.Load())
	})
}

func TestWaitWhenOpenWaitsForTheBreaker(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := breaker.New("dep", breaker.ConsecutiveFailures(1), breaker.OpenTimeout(time.Second))
		p := pipeline.New(pipeline.WithBreaker(b), pipeline.WaitWhenOpen())
		_, _ = pipeline.Do(t.Context(), p, func(context.Context) (int, error) { return 0, errDown })
		start := time.Now()
		got, err := pipeline.Do(t.Context(), p, func(context.Context) (int, error) { return 1, nil })
		require.NoError(t, err, "the call waited for the probe instead of failing")
		assert.Equal(t, 1, got)
		assert.Greater(t, time.Since(start), time.Duration(0))
		assert.LessOrEqual(t, time.Since(start), time.Second+time.Millisecond)
	})
}

// TestDurationOptionsAtTheirBounds: 0 means none and is accepted; a
// negative duration panics, naming the option.
func TestDurationOptionsAtTheirBounds(t *testing.T) {
	for name, opt := range map[string]func(time.Duration) pipeline.Option{
		"WithTimeBudget":     pipeline.WithTimeBudget,
		"WithAttemptTimeout": pipeline.WithAttemptTimeout,
	} {
		t.Run(name, func(t *testing.T) {
			assert.NotPanics(t, func() {
				p := pipeline.New(opt(0))
				_, err := pipeline.Do(t.Context(), p, func(ctx context.Context) (int, error) {
					_, capped := ctx.Deadline()
					assert.False(t, capped, "0: no cap")
					return 1, nil
				})
				require.NoError(t, err)
			})
			assert.PanicsWithValue(t, "pipeline: "+name+"(-1ns): d must be 0 (none) or more", func() { opt(-1) })
		})
	}
}

// WithBreaker(nil) takes the breaker out and keeps the name it gave the
// pipeline; a name given, or none, stays as it was.
func TestWithoutBreakerKeepsTheName(t *testing.T) {
	b := breaker.New("payments")
	for _, tc := range []struct {
		name string
		p    *pipeline.Pipeline
		want string
	}{
		{"breaker's name", pipeline.New(pipeline.WithBreaker(b)).With(pipeline.WithBreaker(nil)), "payments"},
		{"name given", pipeline.New(pipeline.WithBreaker(b), pipeline.WithName("pay")).With(pipeline.WithBreaker(nil)), "pay"},
		{"renamed after", pipeline.New(pipeline.WithBreaker(b)).With(pipeline.WithBreaker(nil), pipeline.WithName("x")), "x"},
		{"never a breaker", pipeline.New(pipeline.WithBreaker(nil)), ""},
		{"another breaker", pipeline.New(pipeline.WithBreaker(b)).With(pipeline.WithBreaker(breaker.New("ledger"))), "ledger"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := tc.p.Stages()
			assert.Equal(t, tc.want, s.Name)
			if tc.name != "another breaker" {
				assert.Nil(t, s.Breaker)
			}
		})
	}
}
