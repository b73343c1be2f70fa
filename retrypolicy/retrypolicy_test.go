package retrypolicy_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/resiliencekit/resiliencekit/resilience"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

var errBlip = errors.New("connection reset")

// failing returns an operation that fails with err and counts its calls.
func failing(calls *atomic.Int64, err error) resilience.Operation[int] {
	return func(context.Context) (int, error) {
		calls.Add(1)
		return 0, err
	}
}

func TestAttemptsByClass(t *testing.T) {
	tests := []struct {
		name   string
		opts   []retrypolicy.Option
		err    error
		calls  int64
		reason error
	}{
		{"transient uses default 4 attempts", nil, errBlip, 4, retrypolicy.ErrMaxAttempts},
		{"max attempts 1", []retrypolicy.Option{retrypolicy.MaxAttempts(1)}, errBlip, 1, retrypolicy.ErrMaxAttempts},
		{"max attempts 7", []retrypolicy.Option{retrypolicy.MaxAttempts(7)}, errBlip, 7, retrypolicy.ErrMaxAttempts},
		{"permanent tried once", nil, resilience.Permanent(errBlip), 1, retrypolicy.ErrNotRetryable},
		{"terminal tried once", nil, resilience.Terminal(errBlip), 1, retrypolicy.ErrNotRetryable},
		{"canceled error tried once", nil, context.Canceled, 1, retrypolicy.ErrNotRetryable},
		{"backoff.Permanent tried once", nil, backoff.Permanent(errBlip), 1, retrypolicy.ErrNotRetryable},
		{"timeout is transient", nil, context.DeadlineExceeded, 4, retrypolicy.ErrMaxAttempts},
		{"RetryIf overrides", []retrypolicy.Option{retrypolicy.RetryIf(func(error) bool { return false })}, errBlip, 1, retrypolicy.ErrNotRetryable},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var calls atomic.Int64
				_, err := retrypolicy.Do(t.Context(), retrypolicy.New(tt.opts...), failing(&calls, tt.err))
				assert.Equal(t, tt.calls, calls.Load())
				require.ErrorIs(t, err, tt.reason)
				require.ErrorIs(t, err, tt.err)
				var re *retrypolicy.Error
				require.ErrorAs(t, err, &re)
				assert.Equal(t, int(tt.calls), re.Attempts)
			})
		})
	}
}

func TestSucceedsAfterBlips(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var calls atomic.Int64
		got, err := retrypolicy.Do(t.Context(), retrypolicy.New(), func(context.Context) (string, error) {
			if calls.Add(1) < 3 {
				return "", errBlip
			}
			return "ok", nil
		})
		require.NoError(t, err)
		assert.Equal(t, "ok", got)
		assert.EqualValues(t, 3, calls.Load())
	})
}

func TestErrorMessageAndClass(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, err := retrypolicy.Do(t.Context(), retrypolicy.New(retrypolicy.MaxAttempts(3)), failing(new(atomic.Int64), errBlip))
		assert.EqualError(t, err, "retry: gave up after 3 attempts (max attempts reached): connection reset")
		assert.Equal(t, resilience.ClassTransient, resilience.Classify(err))

		_, err = retrypolicy.Do(t.Context(), retrypolicy.New(), failing(new(atomic.Int64), resilience.Permanent(errBlip)))
		assert.EqualError(t, err, "retry: gave up after 1 attempt (error not retryable): connection reset")
		assert.True(t, resilience.IsPermanent(err))
	})
}

func TestWithSleepRecordsDelaysWithoutWaiting(t *testing.T) {
	var delays []time.Duration
	p := retrypolicy.New(
		retrypolicy.Jitter(retrypolicy.None),
		retrypolicy.MaxAttempts(6),
		retrypolicy.WithSleep(func(_ context.Context, d time.Duration) error {
			delays = append(delays, d)
			return nil
		}),
	)
	start := time.Now()
	_, err := retrypolicy.Do(context.Background(), p, failing(new(atomic.Int64), errBlip))
	require.ErrorIs(t, err, retrypolicy.ErrMaxAttempts)
	assert.Equal(t, []time.Duration{100e6, 200e6, 400e6, 800e6, 1600e6}, delays)
	assert.Less(t, time.Since(start), time.Second)
}

func TestListenerHearsEachRetry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		type retry struct {
			attempt int
			delay   time.Duration
		}
		var got []retry
		p := retrypolicy.New(retrypolicy.Jitter(retrypolicy.None), retrypolicy.WithListener(onRetry(func(attempt int, err error, delay time.Duration) {
			assert.ErrorIs(t, err, errBlip)
			got = append(got, retry{attempt, delay})
		})))
		start := time.Now()
		_, _ = retrypolicy.Do(t.Context(), p, failing(new(atomic.Int64), errBlip))
		assert.Equal(t, []retry{{1, 100e6}, {2, 200e6}, {3, 400e6}}, got)
		assert.Equal(t, 700*time.Millisecond, time.Since(start), "the caller waited exactly the delays")
	})
}

func TestCancelMidSleepReturnsAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		p := retrypolicy.New(retrypolicy.BaseDelay(10*time.Second), retrypolicy.Jitter(retrypolicy.None))
		var calls atomic.Int64
		go func() {
			time.Sleep(3 * time.Second) // mid-way through the first delay
			cancel()
		}()
		start := time.Now()
		_, err := retrypolicy.Do(ctx, p, failing(&calls, errBlip))
		elapsed := time.Since(start)
		assert.GreaterOrEqual(t, elapsed, 3*time.Second)
		assert.LessOrEqual(t, elapsed, 3*time.Second+time.Millisecond)
		assert.EqualValues(t, 1, calls.Load())
		require.ErrorIs(t, err, context.Canceled)
		require.ErrorIs(t, err, errBlip)
		assert.Equal(t, resilience.ClassCanceled, resilience.Classify(err))
	})
}

func TestDoneContextRunsNothing(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var calls atomic.Int64
	_, err := retrypolicy.Do(ctx, nil, failing(&calls, errBlip))
	require.ErrorIs(t, err, context.Canceled)
	assert.Zero(t, calls.Load())
}

func TestBudgetIsNeverOverrun(t *testing.T) {
	const budget = 5 * time.Second
	tests := []struct {
		name   string
		jitter retrypolicy.JitterMode
	}{
		{"full jitter", retrypolicy.Full},
		{"equal jitter", retrypolicy.Equal},
		{"no jitter", retrypolicy.None},
		{"decorrelated", retrypolicy.Decorrelated},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				start := time.Now()
				opts := []retrypolicy.Option{retrypolicy.MaxAttempts(0), retrypolicy.Jitter(tt.jitter), retrypolicy.BaseDelay(100 * time.Millisecond)}
				ctx, cancel := context.WithTimeout(t.Context(), budget)
				defer cancel()
				opts = append(opts, retrypolicy.WithListener(onRetry(func(_ int, _ error, d time.Duration) {
					assert.Less(t, time.Since(start)+d, budget, "a delay that ends past the budget was slept")
				})))
				var calls atomic.Int64
				_, err := retrypolicy.Do(ctx, retrypolicy.New(opts...), func(ctx context.Context) (int, error) {
					calls.Add(1)
					deadline, ok := ctx.Deadline()
					assert.True(t, ok, "the attempt sees the budget's deadline")
					assert.Equal(t, start.Add(budget), deadline)
					return 0, errBlip
				})
				assert.LessOrEqual(t, time.Since(start), budget)
				require.ErrorIs(t, err, retrypolicy.ErrOutOfTime)
				require.ErrorIs(t, err, context.DeadlineExceeded)
				require.ErrorIs(t, err, errBlip)
				assert.Greater(t, calls.Load(), int64(1))
			})
		})
	}
}

func TestAttemptThatOutlivesTheBudgetEndsTheCall(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		_, err := retrypolicy.Do(ctx, retrypolicy.New(), func(ctx context.Context) (int, error) {
			<-ctx.Done() // a hung dependency
			return 0, ctx.Err()
		})
		assert.Equal(t, time.Second, time.Since(start))
		require.ErrorIs(t, err, retrypolicy.ErrOutOfTime)
		var re *retrypolicy.Error
		require.ErrorAs(t, err, &re)
		assert.Equal(t, 1, re.Attempts)
	})
}

func TestRetryAfterHint(t *testing.T) {
	tests := []struct {
		name string
		hint time.Duration
		max  time.Duration
		want time.Duration
	}{
		{"longer hint is waited", 3 * time.Second, 10 * time.Second, 3 * time.Second},
		{"hint capped by MaxDelay", time.Minute, 10 * time.Second, 10 * time.Second},
		{"shorter hint keeps the backoff", time.Millisecond, 10 * time.Second, 100 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got time.Duration
			p := retrypolicy.New(retrypolicy.Jitter(retrypolicy.None), retrypolicy.MaxAttempts(2), retrypolicy.MaxDelay(tt.max),
				retrypolicy.WithSleep(func(_ context.Context, d time.Duration) error { got = d; return nil }))
			_, _ = retrypolicy.Do(context.Background(), p, failing(new(atomic.Int64), resilience.RetryAfter(errBlip, tt.hint)))
			assert.Equal(t, tt.want, got)
		})
	}
}

func TestRetryAfterPastTheBudgetGivesUpNow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		var calls atomic.Int64
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
		defer cancel()
		_, err := retrypolicy.Do(ctx, retrypolicy.New(), failing(&calls, resilience.RetryAfter(errBlip, 5*time.Second)))
		require.ErrorIs(t, err, retrypolicy.ErrOutOfTime)
		assert.Zero(t, time.Since(start))
		assert.EqualValues(t, 1, calls.Load())
	})
}

// TestGuardStopsTheLoop: the guard is asked before a retry is scheduled
// (a guard already failing costs no delay) and again after its delay,
// before the attempt runs (a guard that fails during the delay stops the
// attempt): each check does what the other cannot.
func TestGuardStopsTheLoop(t *testing.T) {
	errStop := errors.New("stop")
	tests := []struct {
		name    string
		failsAt time.Duration // the guard fails from then on
		elapsed time.Duration // when the loop stops
	}{
		{"failing before the delay: no delay", 0, 0},
		{"failing during the delay: no attempt after it", 50 * time.Millisecond, 100 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				start := time.Now()
				guard := func() error {
					if time.Since(start) >= tt.failsAt {
						return errStop
					}
					return nil
				}
				p := retrypolicy.New(retrypolicy.MaxAttempts(10), retrypolicy.Jitter(retrypolicy.None), retrypolicy.BaseDelay(100*time.Millisecond))
				var calls atomic.Int64
				_, err := retrypolicy.DoGuarded(t.Context(), p, guard, failing(&calls, errBlip))
				require.ErrorIs(t, err, errStop)
				require.ErrorIs(t, err, errBlip)
				assert.EqualValues(t, 1, calls.Load(), "no attempt after the guard failed")
				assert.Equal(t, tt.elapsed, time.Since(start))
			})
		})
	}
}

func TestPolicyIsSafeForConcurrentUse(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := retrypolicy.New(retrypolicy.MaxAttempts(3))
		var calls atomic.Int64
		var wg sync.WaitGroup
		for range 50 {
			wg.Go(func() { _, _ = retrypolicy.Do(t.Context(), p, failing(&calls, errBlip)) })
		}
		wg.Wait()
		assert.EqualValues(t, 150, calls.Load())
	})
}

// onRetry is a listener that calls fn for each scheduled retry.
func onRetry(fn func(attempt int, err error, delay time.Duration)) resilience.Listener {
	return resilience.ListenerFunc(func(e resilience.Event) {
		if e.Kind == resilience.EventRetry {
			fn(e.Attempt, e.Err, e.Delay)
		}
	})
}

// TestUnrepeatableErrorIsNotRetriedAndSaysSo: an error the operation
// cannot repeat ends the loop at once, as a failure, and the listener
// hears that a retry was left out.
func TestUnrepeatableErrorIsNotRetriedAndSaysSo(t *testing.T) {
	var kinds []resilience.EventKind
	p := retrypolicy.New(retrypolicy.BaseDelay(0), retrypolicy.WithListener(resilience.ListenerFunc(func(e resilience.Event) {
		kinds = append(kinds, e.Kind)
	})))
	var calls atomic.Int64
	_, err := retrypolicy.Do(t.Context(), p, failing(&calls, resilience.Unrepeatable(errBlip)))
	require.ErrorIs(t, err, retrypolicy.ErrNotRetryable)
	require.ErrorIs(t, err, errBlip)
	assert.EqualValues(t, 1, calls.Load())
	assert.Equal(t, resilience.ClassTerminal, resilience.Classify(err))
	assert.Equal(t, []resilience.EventKind{resilience.EventAttempt, resilience.EventNotRetried}, kinds)
}
