package retrypolicy_test

import (
	"context"
	"errors"
	"math"
	"runtime"
	"testing"
	"testing/synctest"
	"time"

	"github.com/resiliencekit/resiliencekit/resilience"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

type r127Err struct{ n int }

func (e *r127Err) Error() string { return "r127 transient" }

// A caller that cancels mid-backoff gets its answer at once, canceled.
func TestReview127CancelMidBackoff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := retrypolicy.New(retrypolicy.BaseDelay(10*time.Second), retrypolicy.Jitter(retrypolicy.None), retrypolicy.MaxAttempts(5))
		ctx, cancel := context.WithCancel(t.Context())
		go func() { time.Sleep(3 * time.Second); cancel() }()
		start := time.Now()
		_, err := retrypolicy.Do(ctx, p, func(context.Context) (int, error) { return 0, &r127Err{1} })
		if el := time.Since(start); el != 3*time.Second {
			t.Fatalf("returned after %v, want 3s", el)
		}
		var re *retrypolicy.Error
		if !errors.As(err, &re) || re.Reason != context.Canceled || re.Attempts != 1 {
			t.Fatalf("err %v (%#v)", err, re)
		}
		var mine *r127Err
		if !errors.Is(err, context.Canceled) || !errors.As(err, &mine) || errors.Is(err, retrypolicy.ErrOutOfTime) {
			t.Fatalf("errors.Is/As through Error: %v", err)
		}
		if c := resilience.Classify(err); c != resilience.ClassCanceled {
			t.Fatalf("class %v, want canceled", c)
		}
	})
}

// A cancel with a cause: still canceled.
func TestReview127CancelCauseMidBackoff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := retrypolicy.New(retrypolicy.BaseDelay(10*time.Second), retrypolicy.Jitter(retrypolicy.None))
		ctx, cancel := context.WithCancelCause(t.Context())
		go func() { time.Sleep(time.Second); cancel(errors.New("shutting down")) }()
		_, err := retrypolicy.Do(ctx, p, func(context.Context) (int, error) { return 0, errors.New("x") })
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("err %v", err)
		}
	})
}

// Retry-After hints: huge, negative, zero; none may carry the loop past the
// deadline or past MaxDelay.
func TestReview127RetryAfterBounds(t *testing.T) {
	for _, tc := range []struct {
		name     string
		hint     time.Duration
		maxDelay time.Duration
		deadline time.Duration
		wantWait time.Duration // the wait before the one retry, -1: none (out of time)
	}{
		{"huge hint, huge MaxDelay", math.MaxInt64, math.MaxInt64, time.Second, -1},
		{"huge hint, 500ms MaxDelay", math.MaxInt64, 500 * time.Millisecond, time.Second, 500 * time.Millisecond},
		{"negative hint", -time.Hour, time.Second, time.Hour, 0},
		{"hint exactly to the deadline", time.Second, 10 * time.Second, time.Second, -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				p := retrypolicy.New(retrypolicy.BaseDelay(0), retrypolicy.MaxDelay(tc.maxDelay), retrypolicy.MaxAttempts(2))
				ctx, cancel := context.WithTimeout(t.Context(), tc.deadline)
				defer cancel()
				start := time.Now()
				var at []time.Duration
				_, err := retrypolicy.Do(ctx, p, func(context.Context) (int, error) {
					at = append(at, time.Since(start))
					return 0, resilience.RetryAfter(errors.New("busy"), tc.hint)
				})
				el := time.Since(start)
				if el > tc.deadline {
					t.Fatalf("outlasted the deadline: %v", el)
				}
				if tc.wantWait < 0 {
					if len(at) != 1 || !errors.Is(err, retrypolicy.ErrOutOfTime) || el != 0 {
						t.Fatalf("want out of time at once: attempts %v err %v after %v", at, err, el)
					}
					return
				}
				if len(at) != 2 || at[1] != tc.wantWait {
					t.Fatalf("attempts at %v, want the retry at %v", at, tc.wantWait)
				}
			})
		})
	}
}

// Extreme options: the first delays are in [0, cap] and never negative.
func TestReview127ExtremeDelays(t *testing.T) {
	for _, m := range []retrypolicy.JitterMode{retrypolicy.Full, retrypolicy.Equal, retrypolicy.Decorrelated, retrypolicy.None} {
		for _, base := range []time.Duration{0, 1, math.MaxInt64 / 2, math.MaxInt64 - 1, math.MaxInt64} {
			for _, mx := range []time.Duration{1, time.Second, math.MaxInt64 - 1, math.MaxInt64} {
				p := retrypolicy.New(retrypolicy.Jitter(m), retrypolicy.BaseDelay(base), retrypolicy.MaxDelay(mx))
				n := 0
				for d := range p.Delays() {
					if d < 0 || d > mx {
						t.Fatalf("%v base %v max %v: delay %d = %v", m, base, mx, n, d)
					}
					if n++; n == 80 {
						break
					}
				}
			}
		}
	}
}

// A huge delay with a far deadline: time.Now().Add must not overflow into
// "before the deadline" and sleep forever, nor be judged past a far deadline.
func TestReview127HugeDelayFarDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := retrypolicy.New(retrypolicy.BaseDelay(math.MaxInt64), retrypolicy.MaxDelay(math.MaxInt64), retrypolicy.Jitter(retrypolicy.None))
		ctx, cancel := context.WithTimeout(t.Context(), 200*365*24*time.Hour)
		defer cancel()
		start := time.Now()
		_, err := retrypolicy.Do(ctx, p, func(context.Context) (int, error) { return 0, errors.New("x") })
		if !errors.Is(err, retrypolicy.ErrOutOfTime) || time.Since(start) != 0 {
			t.Fatalf("err %v after %v", err, time.Since(start))
		}
	})
}

// runtime.Goexit in the operation with a quota: the retry taken before it
// stays taken (it was sent), and nothing is refunded twice; the loop
// re-raises Goexit.
func TestReview127GoexitWithQuota(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := retrypolicy.NewQuota(0, 5, time.Second) // 5 retries a second
		p := retrypolicy.New(retrypolicy.BaseDelay(0), retrypolicy.MaxAttempts(10), retrypolicy.WithQuota(q))
		before := q.Available()
		done := make(chan struct{})
		go func() {
			defer close(done)
			n := 0
			retrypolicy.Do(t.Context(), p, func(context.Context) (int, error) {
				if n++; n == 2 {
					runtime.Goexit()
				}
				return 0, errors.New("x")
			})
			t.Error("Do returned after Goexit")
		}()
		<-done
		if after := q.Available(); after != before-1 {
			t.Fatalf("available %d -> %d, want one retry spent", before, after)
		}
	})
}

// A panic in the first attempt propagates, and the quota keeps its
// allowance.
func TestReview127PanicFirstAttempt(t *testing.T) {
	q := retrypolicy.NewQuota(0, 5, time.Second)
	p := retrypolicy.New(retrypolicy.WithQuota(q))
	before := q.Available()
	func() {
		defer func() {
			if recover() == nil {
				t.Fatal("panic swallowed")
			}
		}()
		retrypolicy.Do(context.Background(), p, func(context.Context) (int, error) { panic("boom") })
	}()
	if q.Available() != before {
		t.Fatalf("available %d -> %d", before, q.Available())
	}
}
