package breaker_test

import (
	"context"
	"errors"
	"math"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/resilience"
)

var r70Err = errors.New("boom") // transient

func r70Fail(b *breaker.Breaker, n int) {
	for range n {
		_ = b.Execute(context.Background(), func(context.Context) error { return r70Err })
	}
}

// A half-open breaker under a burst of 1000 callers lets exactly
// HalfOpenRequests probes through.
func TestReview70HalfOpenBurst(t *testing.T) {
	for _, n := range []uint32{1, 3, 7, 64} {
		synctest.Test(t, func(t *testing.T) {
			b := breaker.New("burst", breaker.HalfOpenRequests(n), breaker.OpenTimeout(100*time.Millisecond))
			r70Fail(b, 5)
			if b.State() != resilience.StateOpen {
				t.Fatalf("state %v", b.State())
			}
			time.Sleep(101 * time.Millisecond)
			release := make(chan struct{})
			var ran, busy, open atomic.Int32
			var wg sync.WaitGroup
			for range 1000 {
				wg.Go(func() {
					err := b.Execute(context.Background(), func(context.Context) error {
						ran.Add(1)
						<-release
						return nil
					})
					switch {
					case errors.Is(err, breaker.ErrTooManyRequests):
						busy.Add(1)
					case errors.Is(err, breaker.ErrOpen):
						open.Add(1)
					}
				})
			}
			synctest.Wait()
			if got := ran.Load(); got != int32(n) {
				t.Errorf("n=%d: %d probes ran", n, got)
			}
			close(release)
			wg.Wait()
			if busy.Load()+ran.Load() != 1000 || open.Load() != 0 {
				t.Errorf("n=%d: busy %d ran %d open %d", n, busy.Load(), ran.Load(), open.Load())
			}
			if b.State() != resilience.StateClosed {
				t.Errorf("n=%d: state after all probes succeeded %v", n, b.State())
			}
		})
	}
}

// A probe its caller cancels, or whose deadline is too short, leaves the
// breaker half-open against a healthy dependency, and the next probe
// closes it.
func TestReview70ProbeCutShortHealthy(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := breaker.New("p", breaker.OpenTimeout(100*time.Millisecond))
		// Time some answers of 200 ms.
		for range 20 {
			_ = b.Execute(context.Background(), func(context.Context) error { time.Sleep(200 * time.Millisecond); return nil })
		}
		r70Fail(b, 5)
		time.Sleep(101 * time.Millisecond)
		slow := func(ctx context.Context) error {
			select {
			case <-time.After(200 * time.Millisecond):
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		// 1: canceled by the caller.
		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(50*time.Millisecond, cancel)
		_ = b.Execute(ctx, slow)
		if st := b.State(); st != resilience.StateHalfOpen {
			t.Fatalf("after a canceled probe: %v", st)
		}
		// 2: deadline under 100 ms.
		ctx, cancel = context.WithTimeout(context.Background(), 50*time.Millisecond)
		_ = b.Execute(ctx, slow)
		cancel()
		if st := b.State(); st != resilience.StateHalfOpen {
			t.Fatalf("after a 50ms probe: %v", st)
		}
		// 3: deadline 150 ms, under the slowest answer 200 ms.
		ctx, cancel = context.WithTimeout(context.Background(), 150*time.Millisecond)
		_ = b.Execute(ctx, slow)
		cancel()
		if st := b.State(); st != resilience.StateHalfOpen {
			t.Fatalf("after a 150ms probe: %v", st)
		}
		// 4: the op returns a transient error wrapping the deadline, as a
		// client does.
		ctx, cancel = context.WithTimeout(context.Background(), 150*time.Millisecond)
		_ = b.Execute(ctx, func(ctx context.Context) error {
			<-ctx.Done()
			return errors.New("i/o timeout")
		})
		cancel()
		if st := b.State(); st != resilience.StateHalfOpen {
			t.Fatalf("after a 150ms probe with own error: %v", st)
		}
		// 5: caller hangs up 5ms before its deadline.
		ctx, cancel = context.WithTimeout(context.Background(), 150*time.Millisecond)
		time.AfterFunc(145*time.Millisecond, cancel)
		_ = b.Execute(ctx, slow)
		cancel()
		if st := b.State(); st != resilience.StateHalfOpen {
			t.Fatalf("after a hung-up probe: %v", st)
		}
		if err := b.Execute(context.Background(), slow); err != nil {
			t.Fatal(err)
		}
		if st := b.State(); st != resilience.StateClosed {
			t.Fatalf("after a good probe: %v", st)
		}
	})
}

// Callers with short budgets against a slow-but-healthy dependency never
// open the breaker, many goroutines at once.
func TestReview70ShortBudgetsNeverOpen(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := breaker.New("s", breaker.ConsecutiveFailures(1), breaker.FailureRate(0.01, 1))
		dep := func(ctx context.Context) error {
			select {
			case <-time.After(120 * time.Millisecond):
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		var wg sync.WaitGroup
		var rejected atomic.Int32
		for i := range 200 {
			wg.Go(func() {
				for j := range 50 {
					d := time.Duration(10+(i*7+j*13)%90) * time.Millisecond // 10..99 ms
					ctx, cancel := context.WithTimeout(context.Background(), d)
					err := b.Execute(ctx, dep)
					cancel()
					if breaker.IsRejection(err) {
						rejected.Add(1)
					}
				}
			})
		}
		wg.Wait()
		if rejected.Load() != 0 || b.State() != resilience.StateClosed {
			t.Fatalf("rejected %d, state %v, counts %+v", rejected.Load(), b.State(), b.Counts())
		}
	})
}

// Exact counting under many goroutines.
func TestReview70ExactCounts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := breaker.New("c", breaker.ConsecutiveFailures(0), breaker.Window(time.Hour, 10))
		var wg sync.WaitGroup
		for i := range 100 {
			wg.Go(func() {
				for j := range 100 {
					switch (i + j) % 4 {
					case 0:
						_ = b.Execute(context.Background(), func(context.Context) error { return nil })
					case 1:
						_ = b.Execute(context.Background(), func(context.Context) error { return resilience.Permanent(r70Err) })
					case 2:
						_ = b.Execute(context.Background(), func(context.Context) error { return r70Err })
					case 3:
						ctx, cancel := context.WithCancel(context.Background())
						_ = b.Execute(ctx, func(context.Context) error { cancel(); return context.Canceled })
					}
				}
			})
		}
		wg.Wait()
		c := b.Counts()
		if c.Requests != 10000 || c.TotalSuccesses != 5000 || c.TotalFailures != 2500 || c.TotalExclusions != 2500 {
			t.Fatalf("%+v", c)
		}
	})
}

// Window bucket boundaries: failures drop out exactly when their bucket
// leaves the window.
func TestReview70WindowBoundary(t *testing.T) {
	for _, tc := range []struct {
		at   time.Duration
		trip bool
	}{
		{59*time.Second + 999*time.Millisecond, true},
		{60 * time.Second, false},
		{69*time.Second + 999*time.Millisecond, false},
	} {
		synctest.Test(t, func(t *testing.T) {
			b := breaker.New("w", breaker.Window(time.Minute, 6))
			time.Sleep(9*time.Second + 999*time.Millisecond)
			r70Fail(b, 4)
			time.Sleep(tc.at - (9*time.Second + 999*time.Millisecond))
			r70Fail(b, 1)
			if got := b.State() == resilience.StateOpen; got != tc.trip {
				t.Errorf("5th failure at %v: open %v, want %v (%+v)", tc.at, got, tc.trip, b.Counts())
			}
		})
	}
}

// An overdue probe lets another go after exactly 10 open timeouts, not
// before.
func TestReview70OverdueProbe(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := breaker.New("o", breaker.OpenTimeout(100*time.Millisecond))
		r70Fail(b, 5)
		time.Sleep(101 * time.Millisecond)
		hang := make(chan struct{})
		done := make(chan struct{})
		go func() {
			defer close(done)
			_ = b.Execute(context.Background(), func(context.Context) error { <-hang; return nil })
		}()
		synctest.Wait()
		time.Sleep(999 * time.Millisecond)
		if err := b.Execute(context.Background(), func(context.Context) error { return nil }); !errors.Is(err, breaker.ErrTooManyRequests) {
			t.Fatalf("before 10 timeouts: %v", err)
		}
		time.Sleep(2 * time.Millisecond)
		if err := b.Execute(context.Background(), func(context.Context) error { return nil }); err != nil {
			t.Fatalf("after 10 timeouts: %v", err)
		}
		if b.State() != resilience.StateClosed {
			t.Fatalf("state %v", b.State())
		}
		close(hang)
		<-done
		if b.State() != resilience.StateClosed {
			t.Fatalf("late answer: state %v", b.State())
		}
	})
}

type r70PanicListener struct{}

func (r70PanicListener) OnEvent(e resilience.Event) {
	if e.Kind == resilience.EventStateChange {
		panic("listener")
	}
}

// A listener that panics on a state change harms neither the call nor the
// breaker.
func TestReview70PanickingListener(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := breaker.New("l", breaker.WithListener(r70PanicListener{}), breaker.OpenTimeout(100*time.Millisecond))
		stop := b.Listen(r70PanicListener{})
		defer stop()
		func() {
			defer func() {
				if r := recover(); r != nil {
					t.Errorf("Execute panicked: %v", r)
				}
			}()
			r70Fail(b, 5)
		}()
		if b.State() != resilience.StateOpen {
			t.Fatalf("state %v", b.State())
		}
		time.Sleep(101 * time.Millisecond)
		func() {
			defer func() {
				if r := recover(); r != nil {
					t.Errorf("probe panicked: %v", r)
				}
			}()
			if err := b.Execute(context.Background(), func(context.Context) error { return nil }); err != nil {
				t.Error(err)
			}
		}()
		if b.State() != resilience.StateClosed {
			t.Fatalf("state %v", b.State())
		}
	})
}

type r70Goexit struct{}

// Goexit and panic in op: the call's Goexit/panic goes on; counted neither
// way (documented), and the breaker is not left with a slot taken.
func TestReview70GoexitProbe(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := breaker.New("g", breaker.ConsecutiveFailures(0), breaker.HalfOpenRequests(2))
		var wg sync.WaitGroup
		for range 100 {
			wg.Go(func() {
				_ = b.Execute(context.Background(), func(context.Context) error { runtime.Goexit(); return nil })
			})
			wg.Go(func() {
				defer func() { _ = recover() }()
				_ = b.Execute(context.Background(), func(context.Context) error { panic("x") })
			})
		}
		wg.Wait()
		c := b.Counts()
		if c.Requests != 200 || c.TotalExclusions != 200 || c.TotalFailures != 0 {
			t.Fatalf("%+v", c)
		}
	})
}

// Extreme options.
func TestReview70Extremes(t *testing.T) {
	for _, r := range []float64{math.NaN(), 0, -1, 1.0000001, math.Inf(1)} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("FailureRate(%v) did not panic", r)
				}
			}()
			breaker.FailureRate(r, 1)
		}()
	}
	synctest.Test(t, func(t *testing.T) {
		b := breaker.New("x", breaker.OpenTimeout(math.MaxInt64), breaker.Window(math.MaxInt64, breaker.MaxBuckets),
			breaker.HalfOpenRequests(math.MaxUint32), breaker.ConsecutiveFailures(1))
		r70Fail(b, 1)
		if b.State() != resilience.StateOpen {
			t.Fatalf("state %v", b.State())
		}
		if np := b.NextProbe(); np.Before(time.Now().Add(100 * 365 * 24 * time.Hour)) {
			t.Errorf("NextProbe %v", np)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
		err := b.Execute(ctx, func(context.Context) error { return nil })
		if w := b.Wait(ctx, err); w == nil {
			t.Errorf("Wait returned nil on a breaker open for 292 years")
		}
		cancel()
		ctx, cancel = context.WithCancel(context.Background())
		time.AfterFunc(time.Second, cancel)
		if w := b.Wait(ctx, err); w == nil {
			t.Errorf("Wait without deadline returned nil")
		}
		time.Sleep(24 * time.Hour)
		if b.State() != resilience.StateOpen {
			t.Fatalf("state %v", b.State())
		}
	})
	synctest.Test(t, func(t *testing.T) {
		// Tiny window: 1 ms buckets.
		b := breaker.New("t", breaker.Window(100*time.Millisecond, 100), breaker.ConsecutiveFailures(3))
		for range 1000 {
			r70Fail(b, 2)
			time.Sleep(50 * time.Millisecond)
			_ = b.Execute(context.Background(), func(context.Context) error { return nil })
		}
		if b.State() != resilience.StateClosed {
			t.Fatalf("state %v", b.State())
		}
		r70Fail(b, 3)
		if b.State() != resilience.StateOpen {
			t.Fatalf("state %v", b.State())
		}
	})
	synctest.Test(t, func(t *testing.T) {
		// HalfOpenRequests MaxUint32: every call goes; closes? never
		b := breaker.New("h", breaker.HalfOpenRequests(math.MaxUint32), breaker.OpenTimeout(time.Millisecond))
		r70Fail(b, 5)
		time.Sleep(2 * time.Millisecond)
		for range 10000 {
			if err := b.Execute(context.Background(), func(context.Context) error { return nil }); err != nil {
				t.Fatal(err)
			}
		}
		t.Logf("HalfOpenRequests(MaxUint32) after 10000 successes: %v", b.State())
	})
}
