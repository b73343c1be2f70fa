package retrypolicy

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/resiliencekit/resiliencekit/resilience"
	"go.uber.org/goleak"
)

// A caller that cancels mid-backoff: Do returns at once (no time passes in
// the bubble after the cancel), the reason is context.Canceled, Last is the
// attempt's error; no goroutine is left.
func TestReview45CancelMidBackoffReturnsAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		for _, m := range []JitterMode{Full, Equal, Decorrelated, None} {
			ctx, cancel := context.WithCancel(t.Context())
			blip := errors.New("blip")
			go func() { time.Sleep(30 * time.Millisecond); cancel() }()
			start := time.Now()
			_, err := Do(ctx, New(MaxAttempts(0), BaseDelay(time.Second), MaxDelay(time.Hour), Jitter(m)),
				func(context.Context) (int, error) { return 0, blip })
			el := time.Since(start)
			var e *Error
			if !errors.As(err, &e) || e.Reason != context.Canceled || e.Last != blip || !errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, ErrOutOfTime) {
				t.Fatalf("%v: %#v", m, err)
			}
			if el > 30*time.Millisecond {
				t.Fatalf("%v: returned %v after start, cancel at 30ms", m, el)
			}
			if resilience.Classify(err) != resilience.ClassCanceled {
				t.Fatalf("%v: class %v", m, resilience.Classify(err))
			}
		}
	})
}

// The same in real time, with goleak: no goroutine or timer-driven goroutine left.
func TestReview45CancelMidBackoffRealTimeNoLeak(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	var wg sync.WaitGroup
	var late atomic.Int64
	for i := range 500 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			go func() { time.Sleep(time.Duration(i%20) * time.Millisecond); cancel() }()
			start := time.Now()
			_, _ = Do(ctx, New(MaxAttempts(0), BaseDelay(10*time.Second), Jitter(Equal)), func(context.Context) (int, error) { return 0, errors.New("blip") })
			if el := time.Since(start); el > time.Duration(i%20)*time.Millisecond+200*time.Millisecond {
				late.Add(1)
			}
		}()
	}
	wg.Wait()
	if late.Load() > 0 {
		t.Fatalf("%d calls returned more than 200ms after their cancel", late.Load())
	}
}

// Every reason for giving up: errors.Is and errors.As see the reason and the
// last error, and Attempts is the number of times op ran.
func TestReview45EveryReasonMatches(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		blip := errors.New("blip")
		guardErr := errors.New("guard says no")
		type tc struct {
			name     string
			run      func() (int, error) // returns op runs, err
			reason   error
			attempts int
			last     error
			deadline bool
		}
		cases := []tc{
			{"max", func() (int, error) {
				n := 0
				_, err := Do(t.Context(), New(MaxAttempts(3), BaseDelay(time.Millisecond)), func(context.Context) (int, error) { n++; return 0, blip })
				return n, err
			}, ErrMaxAttempts, 3, blip, false},
			{"notretryable", func() (int, error) {
				n := 0
				_, err := Do(t.Context(), New(), func(context.Context) (int, error) { n++; return 0, resilience.Permanent(blip) })
				return n, err
			}, ErrNotRetryable, 1, blip, false},
			{"out-of-time-before", func() (int, error) {
				ctx, cancel := context.WithTimeout(t.Context(), -time.Second)
				defer cancel()
				n := 0
				_, err := Do(ctx, New(), func(context.Context) (int, error) { n++; return 0, blip })
				return n, err
			}, ErrOutOfTime, 0, nil, true},
			{"out-of-time-lookahead", func() (int, error) {
				ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
				defer cancel()
				n := 0
				_, err := Do(ctx, New(BaseDelay(time.Second), Jitter(None)), func(context.Context) (int, error) { n++; return 0, blip })
				return n, err
			}, ErrOutOfTime, 1, blip, true},
			{"out-of-time-during-attempt", func() (int, error) {
				ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
				defer cancel()
				n := 0
				_, err := Do(ctx, New(), func(ctx context.Context) (int, error) { n++; <-ctx.Done(); return 0, ctx.Err() })
				return n, err
			}, ErrOutOfTime, 1, context.DeadlineExceeded, true},
			{"out-of-time-mid-sleep", func() (int, error) {
				ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
				defer cancel()
				n := 0
				// A sleep function that ignores the look-ahead: the deadline ends mid-sleep.
				_, err := Do(ctx, New(BaseDelay(time.Millisecond), WithSleep(func(ctx context.Context, d time.Duration) error {
					<-ctx.Done()
					return ctx.Err()
				})), func(ctx context.Context) (int, error) { n++; return 0, blip })
				return n, err
			}, ErrOutOfTime, 1, blip, true},
			{"canceled-before", func() (int, error) {
				ctx, cancel := context.WithCancel(t.Context())
				cancel()
				n := 0
				_, err := Do(ctx, New(), func(context.Context) (int, error) { n++; return 0, blip })
				return n, err
			}, context.Canceled, 0, nil, false},
			{"canceled-cause-during", func() (int, error) {
				ctx, cancel := context.WithCancelCause(t.Context())
				n := 0
				_, err := Do(ctx, New(), func(ctx context.Context) (int, error) { n++; cancel(errors.New("my cause")); return 0, blip })
				return n, err
			}, context.Canceled, 1, blip, false},
			{"quota", func() (int, error) {
				q := NewQuota(0, 0, time.Second)
				n := 0
				_, err := Do(t.Context(), New(WithQuota(q)), func(context.Context) (int, error) { n++; return 0, blip })
				return n, err
			}, ErrQuotaExhausted, 1, blip, false},
			{"guard", func() (int, error) {
				n := 0
				_, err := DoGuarded(t.Context(), New(), func() error { return guardErr }, func(context.Context) (int, error) { n++; return 0, blip })
				return n, err
			}, guardErr, 1, blip, false},
			{"guard-after-sleep", func() (int, error) {
				n, g := 0, 0
				_, err := DoGuarded(t.Context(), New(), func() error {
					g++
					if g == 2 {
						return guardErr
					}
					return nil
				}, func(context.Context) (int, error) { n++; return 0, blip })
				return n, err
			}, guardErr, 1, blip, false},
			{"sleep-error", func() (int, error) {
				n := 0
				serr := errors.New("sleep broke")
				_, err := Do(t.Context(), New(WithSleep(func(context.Context, time.Duration) error { return serr })), func(context.Context) (int, error) { n++; return 0, blip })
				if !errors.Is(err, serr) {
					return n, fmt.Errorf("sleep error lost: %w", err)
				}
				return n, err
			}, nil, 1, blip, false},
		}
		for _, c := range cases {
			n, err := c.run()
			var e *Error
			if !errors.As(err, &e) {
				t.Errorf("%s: not an *Error: %v", c.name, err)
				continue
			}
			if c.reason != nil && (!errors.Is(err, c.reason) || e.Reason != c.reason) {
				t.Errorf("%s: reason %v, want %v", c.name, e.Reason, c.reason)
			}
			if e.Attempts != c.attempts || n != c.attempts {
				t.Errorf("%s: Attempts %d, op ran %d, want %d", c.name, e.Attempts, n, c.attempts)
			}
			if c.last == nil && e.Last != nil || c.last != nil && !errors.Is(e.Last, c.last) || c.last != nil && !errors.Is(err, c.last) {
				t.Errorf("%s: Last %v, want %v", c.name, e.Last, c.last)
			}
			if got := errors.Is(err, context.DeadlineExceeded); got != c.deadline {
				t.Errorf("%s: errors.Is(DeadlineExceeded) = %v", c.name, got)
			}
			if got := errors.Is(err, ErrOutOfTime); got != c.deadline {
				t.Errorf("%s: errors.Is(ErrOutOfTime) = %v", c.name, got)
			}
			if e.Error() == "" {
				t.Errorf("%s: empty message", c.name)
			}
		}
	})
}

type r45classed struct{ c resilience.Class }

func (e *r45classed) Error() string                     { return "classed" }
func (e *r45classed) ResilienceClass() resilience.Class { return e.c }

type r45plain struct{}

func (*r45plain) Error() string { return "typed nil" }

// Classification: only transient errors are retried; wrapped, joined,
// custom-classed, backoff.Permanent, typed-nil.
func TestReview45Classification(t *testing.T) {
	blip := errors.New("blip")
	var typedNil *r45plain
	var typedNilClassed *r45classed
	_ = typedNilClassed
	cases := []struct {
		name  string
		err   error
		runs  int
		class resilience.Class
	}{
		{"transient", blip, 3, resilience.ClassTransient},
		{"permanent", resilience.Permanent(blip), 1, resilience.ClassPermanent},
		{"terminal", resilience.Terminal(blip), 1, resilience.ClassTerminal},
		{"rejected", resilience.Rejected(blip), 1, resilience.ClassRejected},
		{"unrepeatable", resilience.Unrepeatable(blip), 1, resilience.ClassTerminal},
		{"canceled", context.Canceled, 1, resilience.ClassCanceled},
		{"wrapped-canceled", fmt.Errorf("op: %w", context.Canceled), 1, resilience.ClassCanceled},
		{"deadline-exceeded-own", context.DeadlineExceeded, 3, resilience.ClassTransient},
		{"wrapped-permanent", fmt.Errorf("x: %w", resilience.Permanent(blip)), 1, resilience.ClassPermanent},
		{"joined-transient-permanent", errors.Join(blip, resilience.Permanent(blip)), 1, resilience.ClassPermanent},
		{"joined-transient-canceled", errors.Join(blip, context.Canceled), 1, resilience.ClassCanceled},
		{"custom-transient", &r45classed{resilience.ClassTransient}, 3, resilience.ClassTransient},
		{"custom-permanent", &r45classed{resilience.ClassPermanent}, 1, resilience.ClassPermanent},
		{"custom-success-class-is-none", &r45classed{resilience.ClassSuccess}, 3, resilience.ClassTransient}, // an error is never a success
		{"custom-unknown-class-is-none", &r45classed{resilience.Class(99)}, 3, resilience.ClassTransient},
		{"backoff-permanent", backoff.Permanent(blip), 1, resilience.ClassTransient},
		{"wrapped-backoff-permanent", fmt.Errorf("x: %w", backoff.Permanent(blip)), 1, resilience.ClassTransient},
		{"typed-nil", typedNil, 3, resilience.ClassTransient},
		{"retry-after-permanent", resilience.RetryAfter(resilience.Permanent(blip), time.Millisecond), 1, resilience.ClassPermanent},
	}
	for _, c := range cases {
		n := 0
		_, err := Do(context.Background(), New(MaxAttempts(3), BaseDelay(0)), func(context.Context) (int, error) { n++; return 0, c.err })
		var e *Error
		if n != c.runs || !errors.As(err, &e) || e.Attempts != n {
			t.Errorf("%s: ran %d, want %d (%v)", c.name, n, c.runs, err)
			continue
		}
		if got := e.ResilienceClass(); got != c.class {
			t.Errorf("%s: Error class %v, want %v", c.name, got, c.class)
		}
		if c.runs == 1 && e.Reason != ErrNotRetryable {
			t.Errorf("%s: reason %v", c.name, e.Reason)
		}
	}
}

// A panic in the op propagates unchanged; runtime.Goexit ends the goroutine
// (its defers run); the listener counts a failed attempt; no goroutine left.
func TestReview45PanicAndGoexit(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	var events []resilience.Event
	var mu sync.Mutex
	l := resilience.ListenerFunc(func(e resilience.Event) { mu.Lock(); events = append(events, e); mu.Unlock() })
	p := New(MaxAttempts(5), BaseDelay(time.Millisecond), WithListener(l))
	func() {
		defer func() {
			if r := recover(); r != "boom" {
				t.Errorf("recovered %v", r)
			}
		}()
		n := 0
		_, _ = Do(context.Background(), p, func(context.Context) (int, error) {
			n++
			if n == 2 {
				panic("boom")
			}
			return 0, errors.New("blip")
		})
		t.Error("Do returned after a panic")
	}()
	done := make(chan bool)
	go func() {
		defer close(done)
		n := 0
		_, _ = Do(context.Background(), p, func(context.Context) (int, error) {
			n++
			if n == 3 {
				runtime.Goexit()
			}
			return 0, errors.New("blip")
		})
		done <- true // not reached
	}()
	select {
	case v, ok := <-done:
		if ok {
			t.Errorf("Do returned after Goexit: %v", v)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Goexit hung")
	}
	// Quota after a panicking call: the call was deposited and one retry taken; still usable.
	q := NewQuota(0, 100, time.Second)
	func() {
		defer func() { recover() }()
		_, _ = Do(context.Background(), New(WithQuota(q), BaseDelay(0)), func(context.Context) (int, error) { panic("x") })
	}()
	if q.Available() < 1 {
		t.Errorf("quota unusable after panic: %d", q.Available())
	}
}

// Do-no-harm: a last attempt that succeeds after the deadline passed (an
// op that ignores ctx) is returned as a success, by Do and Resume.
func TestReview45SuccessAfterDeadlineIsReturned(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
		defer cancel()
		n := 0
		v, err := Do(ctx, New(MaxAttempts(2), BaseDelay(time.Millisecond)), func(ctx context.Context) (int, error) {
			n++
			if n == 1 {
				return 0, errors.New("blip")
			}
			time.Sleep(time.Second) // past the deadline
			return 42, nil
		})
		if v != 42 || err != nil {
			t.Fatalf("success after deadline lost: %v %v", v, err)
		}
		// The first and only attempt.
		v, err = Do(ctx, New(), func(ctx context.Context) (int, error) { time.Sleep(time.Second); return 43, nil })
		if err == nil {
			t.Logf("note: ctx already done; %v %v", v, err)
		}
	})
}

// The caller's own errors are never retried endlessly: an op that keeps
// returning ctx.Err()-like errors with ctx canceled, or Rejected errors,
// runs once even with MaxAttempts(0) and no deadline.
func TestReview45CallersErrorsNotRetriedEndlessly(t *testing.T) {
	for _, err := range []error{resilience.Rejected(errors.New("bad url")), context.Canceled, fmt.Errorf("w: %w", context.Canceled)} {
		n := 0
		done := make(chan struct{})
		go func() {
			defer close(done)
			_, _ = Do(context.Background(), New(MaxAttempts(0), BaseDelay(0)), func(context.Context) (int, error) {
				n++
				if n > 1000 {
					panic("endless")
				}
				return 0, err
			})
		}()
		<-done
		if n != 1 {
			t.Errorf("%v: ran %d", err, n)
		}
	}
	// A RetryIf that says yes to everything still stops at a done context.
	ctx, cancel := context.WithCancel(context.Background())
	n := 0
	_, err := Do(ctx, New(MaxAttempts(0), BaseDelay(0), RetryIf(func(error) bool { return true })), func(context.Context) (int, error) {
		n++
		if n == 3 {
			cancel()
		}
		return 0, context.Canceled
	})
	if n != 3 || !errors.Is(err, context.Canceled) {
		t.Errorf("RetryIf(true): ran %d, %v", n, err)
	}
}
