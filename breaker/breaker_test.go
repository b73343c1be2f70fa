package breaker_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/resilience"
)

var errDown = errors.New("connection refused")

// dependency is a fake that fails while down and counts its calls.
type dependency struct {
	calls atomic.Int64
	down  atomic.Bool
}

func (d *dependency) call(context.Context) error {
	d.calls.Add(1)
	if d.down.Load() {
		return errDown
	}
	return nil
}

func TestOpensProbesAndCloses(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		var changes []string
		b := breaker.New("payments", breaker.ConsecutiveFailures(3), breaker.OpenTimeout(10*time.Second),
			breaker.WithListener(resilience.ListenerFunc(func(e resilience.Event) {
				if e.Kind == resilience.EventStateChange {
					changes = append(changes, fmt.Sprintf("%s: %s->%s", e.Name, e.From, e.To))
				}
			})))
		dep := &dependency{}
		dep.down.Store(true)

		for range 3 {
			require.ErrorIs(t, b.Execute(ctx, dep.call), errDown)
		}
		assert.Equal(t, resilience.StateOpen, b.State())
		require.ErrorIs(t, b.Check(), breaker.ErrOpen)

		for range 100 {
			err := b.Execute(ctx, dep.call)
			require.ErrorIs(t, err, breaker.ErrOpen)
			assert.EqualError(t, err, `breaker "payments": circuit breaker is open`)
			assert.Equal(t, resilience.ClassTerminal, resilience.Classify(err))
		}
		assert.EqualValues(t, 3, dep.calls.Load(), "an open breaker never calls the dependency")

		time.Sleep(10 * time.Second)
		require.ErrorIs(t, b.Execute(ctx, dep.call), breaker.ErrOpen, "still open at exactly OpenTimeout")
		time.Sleep(time.Nanosecond)
		assert.Equal(t, resilience.StateHalfOpen, b.State())

		dep.down.Store(false)
		require.NoError(t, b.Execute(ctx, dep.call))
		assert.EqualValues(t, 4, dep.calls.Load(), "one probe")
		assert.Equal(t, resilience.StateClosed, b.State())
		require.NoError(t, b.Check())
		assert.Equal(t, []string{
			"payments: closed->open",
			"payments: open->half-open",
			"payments: half-open->closed",
		}, changes)
	})
}

func TestFailedProbeReopens(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := breaker.New("db", breaker.ConsecutiveFailures(1), breaker.OpenTimeout(time.Second))
		dep := &dependency{}
		dep.down.Store(true)
		_ = b.Execute(t.Context(), dep.call)
		time.Sleep(time.Second + time.Nanosecond)
		require.ErrorIs(t, b.Execute(t.Context(), dep.call), errDown)
		assert.Equal(t, resilience.StateOpen, b.State())
		assert.EqualValues(t, 2, dep.calls.Load())
	})
}

func TestHalfOpenAdmitsOnlyItsProbes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := breaker.New("search", breaker.ConsecutiveFailures(1), breaker.OpenTimeout(time.Second), breaker.HalfOpenRequests(2))
		_ = b.Execute(t.Context(), func(context.Context) error { return errDown })
		time.Sleep(2 * time.Second)

		release := make(chan struct{})
		var wg sync.WaitGroup
		for range 2 {
			wg.Go(func() {
				assert.NoError(t, b.Execute(t.Context(), func(context.Context) error { <-release; return nil }))
			})
		}
		synctest.Wait()
		err := b.Execute(t.Context(), func(context.Context) error { return nil })
		require.ErrorIs(t, err, breaker.ErrTooManyRequests)
		assert.Equal(t, resilience.ClassTerminal, resilience.Classify(err))
		close(release)
		wg.Wait()
		assert.Equal(t, resilience.StateClosed, b.State(), "two probe successes close it")
	})
}

func TestWhatCountsAsFailure(t *testing.T) {
	tests := []struct {
		name    string
		err     error
		opts    []breaker.Option
		opens   bool
		ignored bool
	}{
		{"transient", errDown, nil, true, false},
		{"timeout", context.DeadlineExceeded, nil, true, false},
		{"terminal", resilience.Terminal(errDown), nil, true, false},
		{"permanent is a success", resilience.Permanent(errDown), nil, false, false},
		{"canceled is ignored", fmt.Errorf("call: %w", context.Canceled), nil, false, true},
		{"FailIf overrides", errDown, []breaker.Option{breaker.FailIf(func(error) bool { return false })}, false, false},
		{"IgnoreIf overrides", errDown, []breaker.Option{breaker.IgnoreIf(func(error) bool { return true })}, false, true},
		{"what IgnoreIf keeps counts by its class", errDown, []breaker.Option{breaker.IgnoreIf(func(error) bool { return false })}, true, false},
		{"what IgnoreIf keeps, permanent, is a success", resilience.Permanent(errDown), []breaker.Option{breaker.IgnoreIf(func(error) bool { return false })}, false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := breaker.New("x", append([]breaker.Option{breaker.ConsecutiveFailures(2)}, tt.opts...)...)
			for range 2 {
				require.ErrorIs(t, b.Execute(context.Background(), func(context.Context) error { return tt.err }), tt.err)
			}
			assert.Equal(t, tt.opens, b.State() == resilience.StateOpen)
			if !tt.opens {
				c := b.Counts()
				assert.EqualValues(t, 2, c.Requests)
				if tt.ignored {
					assert.EqualValues(t, 2, c.TotalExclusions)
				} else {
					assert.EqualValues(t, 2, c.TotalSuccesses)
				}
			}
		})
	}
}

func TestCallerCancellationIsNotCounted(t *testing.T) {
	b := breaker.New("x", breaker.ConsecutiveFailures(1))
	ctx, cancel := context.WithCancel(context.Background())
	err := b.Execute(ctx, func(context.Context) error {
		cancel()
		return errDown // what a client returns when its request is torn down
	})
	require.ErrorIs(t, err, errDown)
	assert.Equal(t, resilience.StateClosed, b.State())

	var called bool
	err = b.Execute(ctx, func(context.Context) error { called = true; return nil })
	require.ErrorIs(t, err, context.Canceled)
	assert.False(t, called, "a done context makes no call")
}

func TestFailureRate(t *testing.T) {
	b := breaker.New("x", breaker.ConsecutiveFailures(0), breaker.FailureRate(0.5, 10))
	ctx := context.Background()
	for i := range 9 {
		_ = b.Execute(ctx, func(context.Context) error {
			if i%2 == 0 {
				return errDown
			}
			return nil
		})
	}
	assert.Equal(t, resilience.StateClosed, b.State(), "5 of 9 failed, below the minimum of 10 calls")
	_ = b.Execute(ctx, func(context.Context) error { return nil })
	assert.Equal(t, resilience.StateClosed, b.State(), "5 of 10 failed, the 10th a success: rate is only checked on failures")
	_ = b.Execute(ctx, func(context.Context) error { return errDown })
	assert.Equal(t, resilience.StateOpen, b.State(), "6 of 11 failed")
}

func TestWindowForgetsOldFailures(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := breaker.New("x", breaker.ConsecutiveFailures(0), breaker.FailureRate(0.5, 4), breaker.Window(10*time.Second, 10))
		fail := func(context.Context) error { return errDown }
		ok := func(context.Context) error { return nil }
		_ = b.Execute(t.Context(), fail)
		_ = b.Execute(t.Context(), fail)
		time.Sleep(11 * time.Second) // both failures drop out of the window
		_ = b.Execute(t.Context(), ok)
		_ = b.Execute(t.Context(), ok)
		_ = b.Execute(t.Context(), ok)
		_ = b.Execute(t.Context(), fail)
		assert.Equal(t, resilience.StateClosed, b.State(), "1 of 4 in the window")
		assert.EqualValues(t, 4, b.Counts().Requests)
	})
}

// TestPanicIsNotCounted: a panic in op is the caller's bug, not the
// dependency's failure: it goes on, and the breaker counts the call
// neither way, so that panicking calls never open it for the healthy ones.
func TestPanicIsNotCounted(t *testing.T) {
	b := breaker.New("x", breaker.ConsecutiveFailures(1))
	for range 10 {
		assert.PanicsWithValue(t, "boom", func() {
			_ = b.Execute(context.Background(), func(context.Context) error { panic("boom") })
		})
	}
	assert.Equal(t, resilience.StateClosed, b.State())
	c := b.Counts()
	assert.EqualValues(t, 10, c.TotalExclusions)
	assert.Zero(t, c.TotalFailures+c.TotalSuccesses)
	require.NoError(t, b.Execute(context.Background(), func(context.Context) error { return nil }))
}

func TestSafeForConcurrentUse(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := breaker.New("x", breaker.ConsecutiveFailures(5))
		dep := &dependency{}
		var wg sync.WaitGroup
		for i := range 100 {
			wg.Go(func() {
				if i == 50 {
					dep.down.Store(true)
				}
				_ = b.Execute(t.Context(), dep.call)
				_ = b.State()
				_ = b.Counts()
			})
		}
		wg.Wait()
	})
}

func TestStateString(t *testing.T) {
	for s, want := range map[resilience.State]string{resilience.StateClosed: "closed", resilience.StateHalfOpen: "half-open", resilience.StateOpen: "open", 7: "unknown"} {
		assert.Equal(t, want, s.String())
	}
}

func TestNonsenseOptionsPanicNamingTheOption(t *testing.T) {
	tests := []struct {
		name string
		f    func()
		want string
	}{
		{"NaN rate", func() { breaker.FailureRate(math.NaN(), 10) }, "FailureRate(NaN, 10)"},
		{"zero rate", func() { breaker.FailureRate(0, 10) }, "FailureRate(0, 10)"},
		{"rate above 1", func() { breaker.FailureRate(1.5, 10) }, "FailureRate(1.5, 10)"},
		{"too many buckets", func() { breaker.Window(time.Second, 20_000) }, "Window(1s, 20000)"},
		{"no bucket", func() { breaker.Window(time.Second, 0) }, "Window(1s, 0)"},
		{"negative window", func() { breaker.Window(-time.Second, 10) }, "Window(-1s, 10)"},
		{"buckets under a millisecond", func() { breaker.Window(5*time.Millisecond, 10) }, "Window(5ms, 10)"},
		{"zero open timeout", func() { breaker.OpenTimeout(0) }, "OpenTimeout(0s)"},
		{"zero flush interval", func() { breaker.FlushInterval(0) }, "FlushInterval(0s)"},
		{"flush interval past a day", func() { breaker.FlushInterval(breaker.MaxFlushInterval + 1) }, "at most 24h0m0s"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			defer func() {
				r := recover()
				require.NotNil(t, r, "no panic")
				assert.Contains(t, r, tt.want)
			}()
			tt.f()
		})
	}
}
