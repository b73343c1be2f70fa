package breaker_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/resilience"
	"github.com/stretchr/testify/require"
)

// A healthy dependency (answers in 1 ms). Callers give 50 ms budgets, under
// the documented 100 ms floor. The op notices its deadline and returns
// ctx.Err() 60 ms later (a driver that sends a cancel request and waits
// for its answer, a client that drains a connection, a GC pause). The
// package doc says "a budget under 100 ms ... never opens the breaker by
// running out".
func TestReview37BudgetUnder100msOverrunOpens(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := breaker.New("dep") // 5 consecutive failures
		ok := func(ctx context.Context) error { time.Sleep(time.Millisecond); return nil }
		for range 20 {
			require.NoError(t, b.Execute(context.Background(), ok))
		}
		slowToReturn := func(ctx context.Context) error {
			<-ctx.Done()
			time.Sleep(60 * time.Millisecond) // cleanup after the deadline
			return ctx.Err()
		}
		for range 5 {
			ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
			_ = b.Execute(ctx, slowToReturn)
			cancel()
		}
		require.Equal(t, resilience.StateClosed, b.State(),
			"50 ms budgets opened the breaker of a healthy dependency: counts %+v", b.Counts())
	})
}

// Same, above the floor: the dependency's slowest recent answer is 400 ms
// (it is healthy and answers every call); callers with 300 ms budgets are
// under it and must be left out. An op that returns 150 ms after its
// deadline makes "had" 450 ms, over the slowest answer.
func TestReview37BudgetUnderSlowestOverrunOpens(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := breaker.New("dep")
		slow := func(ctx context.Context) error {
			select {
			case <-time.After(400 * time.Millisecond):
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		for range 3 {
			require.NoError(t, b.Execute(context.Background(), slow))
		}
		slowToReturn := func(ctx context.Context) error {
			err := slow(ctx)
			if err != nil {
				time.Sleep(150 * time.Millisecond)
			}
			return err
		}
		for range 5 {
			ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
			_ = b.Execute(ctx, slowToReturn)
			cancel()
		}
		require.Equal(t, resilience.StateClosed, b.State(),
			"300 ms budgets, under the 400 ms slowest answer, opened the breaker: counts %+v", b.Counts())
	})
}

// The ±10 ms hang-up window: a caller upstream hangs up 8 ms after this
// hop's deadline (within the window, so "taken for one its deadline
// ended"). The budget is 95 ms, under the floor; the hang-up is measured
// from the end, so "had" is 103 ms and it counts.
func TestReview37HangUpAfterDeadlineUnder100msOpens(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := breaker.New("dep")
		ok := func(ctx context.Context) error { time.Sleep(time.Millisecond); return nil }
		for range 20 {
			require.NoError(t, b.Execute(context.Background(), ok))
		}
		for range 5 {
			parent, hangUp := context.WithCancel(context.Background())
			ctx, cancel := context.WithDeadline(parent, time.Now().Add(95*time.Millisecond))
			_ = b.Execute(ctx, func(ctx context.Context) error {
				// the op's own wait: it ignores its deadline's DeadlineExceeded as
				// a hop does whose dependency is a stream read; it returns on the hang-up.
				time.Sleep(103 * time.Millisecond)
				hangUp()
				return context.Canceled
			})
			cancel()
		}
		require.Equal(t, resilience.StateClosed, b.State(),
			"95 ms budgets opened the breaker: counts %+v", b.Counts())
	})
}

// Controls: the same calls returning at their deadline stay left out.
func TestReview37ControlsPromptReturnStaysClosed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := breaker.New("dep")
		ok := func(ctx context.Context) error { time.Sleep(time.Millisecond); return nil }
		for range 20 {
			require.NoError(t, b.Execute(context.Background(), ok))
		}
		for range 10 {
			ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
			_ = b.Execute(ctx, func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() })
			cancel()
		}
		for range 10 {
			parent, hangUp := context.WithCancel(context.Background())
			ctx, cancel := context.WithDeadline(parent, time.Now().Add(95*time.Millisecond))
			_ = b.Execute(ctx, func(ctx context.Context) error {
				time.Sleep(90 * time.Millisecond) // hang-up 5 ms before the deadline
				hangUp()
				return context.Canceled
			})
			cancel()
		}
		require.Equal(t, resilience.StateClosed, b.State(), "counts %+v", b.Counts())
	})
}

// Real time, no overrun in the op: 200 callers at once with 97 ms budgets,
// ops that return as soon as their deadline comes. Scheduling delay alone
// (a loaded 2-core machine) pushes the measured time past 100 ms.
func TestReview37RealTimeBudget97msOpens(t *testing.T) {
	b := breaker.New("dep")
	for range 20 {
		require.NoError(t, b.Execute(context.Background(), func(context.Context) error { return nil }))
	}
	done := make(chan struct{})
	for range 200 {
		go func() {
			defer func() { done <- struct{}{} }()
			ctx, cancel := context.WithTimeout(context.Background(), 97*time.Millisecond)
			defer cancel()
			_ = b.Execute(ctx, func(ctx context.Context) error {
				<-ctx.Done()
				x := 0
				for i := range 200000 { // a little work after the deadline, as a client's teardown
					x += i
				}
				_ = x
				return ctx.Err()
			})
		}()
	}
	for range 200 {
		<-done
	}
	require.Equal(t, resilience.StateClosed, b.State(), "counts %+v", b.Counts())
}
