package retrypolicy

import (
	"context"
	"errors"
	"math"
	"testing"
	"testing/synctest"
	"time"

	"github.com/resiliencekit/resiliencekit/resilience"
)

// r45cap is cap(n) = min(base*2^n, max), computed without overflow.
func r45cap(base, maxd time.Duration, n int) time.Duration {
	c := min(base, maxd)
	for i := 0; i < n; i++ {
		if c >= maxd/2+1 || c > math.MaxInt64/2 {
			return maxd
		}
		c *= 2
	}
	return min(c, maxd)
}

var r45extremes = []struct {
	name      string
	base, max time.Duration
}{
	{"defaults", 100 * time.Millisecond, 10 * time.Second},
	{"maxint-max", 100 * time.Millisecond, math.MaxInt64},
	{"maxint-both", math.MaxInt64, math.MaxInt64},
	{"near-maxint-base", math.MaxInt64 - 1, math.MaxInt64},
	{"half-maxint", math.MaxInt64/2 + 1, math.MaxInt64},
	{"base-above-max", 10 * time.Second, time.Millisecond},
	{"base-zero", 0, time.Second},
	{"one-ns", 1, 1},
	{"odd", 3, 5},
	{"max-1ns", time.Second, 1},
	{"2^53+1", 1<<53 + 1, math.MaxInt64},
	{"near-maxint-max", 1, math.MaxInt64 - 511},
}

// Every delay of every mode lies in its documented range, for extreme
// options: never negative, never above MaxDelay.
func TestReview45DelaysWithinRangeAtExtremes(t *testing.T) {
	for _, x := range r45extremes {
		for _, m := range []JitterMode{Full, Equal, Decorrelated, None} {
			p := New(BaseDelay(x.base), MaxDelay(x.max), Jitter(m))
			n := 0
			prev := time.Duration(-1)
			for d := range p.Delays() {
				if d < 0 || d > x.max {
					t.Fatalf("%s/%v: delay %d = %d outside [0, %d]", x.name, m, n, d, x.max)
				}
				c := r45cap(x.base, x.max, n)
				switch m {
				case Full:
					if d > r45sat(c, c>>50) {
						t.Fatalf("%s/full: delay %d = %d above cap %d", x.name, n, d, c)
					}
				case Equal:
					if d > r45sat(c, c>>50) || d < c/2-c>>50 {
						t.Fatalf("%s/equal: delay %d = %d outside [%d, %d]", x.name, n, d, c/2, c)
					}
				case None:
					if diff := d - c; diff != 0 && (c < 1<<53 || diff > c>>50 || diff < -(c>>50)) { // float64 steps of backoff/v4: within an ulp above 2^53
						t.Fatalf("%s/none: delay %d = %d, want cap %d", x.name, n, d, c)
					}
				case Decorrelated:
					lo := min(x.base, x.max)
					if d < lo {
						t.Fatalf("%s/decorrelated: delay %d = %d below %d", x.name, n, d, lo)
					}
					if prev >= 0 && prev <= math.MaxInt64/3 && d > max(3*prev, lo) {
						t.Fatalf("%s/decorrelated: delay %d = %d above 3*previous %d", x.name, n, d, prev)
					}
				}
				prev = d
				n++
				if n == 200 {
					break
				}
			}
		}
	}
}

// The loop with extreme options: MaxDelay(MaxInt64) and a huge base, with
// a recording sleep: every delay slept is in [0, MaxDelay], the attempts
// are MaxAttempts.
func TestReview45LoopExtremeDelaysRecorded(t *testing.T) {
	for _, x := range r45extremes {
		var slept []time.Duration
		p := New(MaxAttempts(80), BaseDelay(x.base), MaxDelay(x.max), Jitter(None),
			WithSleep(func(ctx context.Context, d time.Duration) error { slept = append(slept, d); return nil }))
		calls := 0
		_, err := Do(context.Background(), p, func(context.Context) (int, error) { calls++; return 0, errors.New("blip") })
		if calls != 80 || !errors.Is(err, ErrMaxAttempts) {
			t.Fatalf("%s: calls %d err %v", x.name, calls, err)
		}
		for i, d := range slept {
			if d < 0 || d > x.max {
				t.Fatalf("%s: slept %d: %v", x.name, i, d)
			}
		}
	}
}

// A deadline and a delay near MaxInt64: the look-ahead does not overflow
// into sleeping (time.Now().Add saturating or wrapping).
func TestReview45LookAheadHugeDelay(t *testing.T) {
	slept := false
	p := New(MaxAttempts(3), BaseDelay(math.MaxInt64), MaxDelay(math.MaxInt64), Jitter(None),
		WithSleep(func(ctx context.Context, d time.Duration) error { slept = true; return nil }))
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	_, err := Do(ctx, p, func(context.Context) (int, error) { return 0, errors.New("blip") })
	if slept || !errors.Is(err, ErrOutOfTime) {
		t.Fatalf("slept %v, err %v", slept, err)
	}
	// A deadline far in the future (year 2200, a wall time without monotonic reading).
	ctx2, cancel2 := context.WithDeadline(context.Background(), time.Date(2200, 1, 1, 0, 0, 0, 0, time.UTC))
	defer cancel2()
	slept = false
	_, err = Do(ctx2, p, func(context.Context) (int, error) { return 0, errors.New("blip") })
	if slept || !errors.Is(err, ErrOutOfTime) {
		t.Fatalf("far deadline: slept %v, err %v", slept, err)
	}
}

// MaxAttempts 0 (unlimited) stops at the deadline; MaxAttempts 1 never
// retries; huge MaxAttempts is unlimited in practice.
func TestReview45AttemptsExtremes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		calls := 0
		_, err := Do(ctx, New(MaxAttempts(0), BaseDelay(time.Millisecond), MaxDelay(100*time.Millisecond)),
			func(context.Context) (int, error) { calls++; return 0, errors.New("blip") })
		var e *Error
		if !errors.As(err, &e) || !errors.Is(err, ErrOutOfTime) || !errors.Is(err, context.DeadlineExceeded) || e.Attempts != calls {
			t.Fatalf("unlimited: %v (calls %d)", err, calls)
		}
		if calls < 50 {
			t.Fatalf("unlimited made only %d attempts in 10 s of 100ms-capped delays", calls)
		}
		calls = 0
		_, err = Do(t.Context(), New(MaxAttempts(1)), func(context.Context) (int, error) { calls++; return 0, errors.New("blip") })
		if calls != 1 || !errors.Is(err, ErrMaxAttempts) || !errors.As(err, &e) || e.Attempts != 1 {
			t.Fatalf("one: %v calls %d", err, calls)
		}
		calls = 0
		_, err = Do(t.Context(), New(MaxAttempts(math.MaxInt), BaseDelay(0)), func(context.Context) (int, error) {
			calls++
			if calls == 1000 {
				return 7, nil
			}
			return 0, errors.New("blip")
		})
		if err != nil || calls != 1000 {
			t.Fatalf("maxint: %v calls %d", err, calls)
		}
	})
}

// Options that must panic do, at once; the rest do not.
func TestReview45OptionPanics(t *testing.T) {
	mustPanic := func(name string, f func()) {
		t.Helper()
		defer func() {
			if recover() == nil {
				t.Errorf("%s did not panic", name)
			}
		}()
		f()
	}
	mustPanic("MaxAttempts(-1)", func() { MaxAttempts(-1) })
	mustPanic("MaxAttempts(MinInt)", func() { MaxAttempts(math.MinInt) })
	mustPanic("BaseDelay(-1)", func() { BaseDelay(-1) })
	mustPanic("MaxDelay(0)", func() { MaxDelay(0) })
	mustPanic("MaxDelay(MinInt64)", func() { MaxDelay(math.MinInt64) })
	mustPanic("Jitter(4)", func() { Jitter(4) })
	mustPanic("NewQuota NaN", func() { NewQuota(math.NaN(), 0, 0) })
	mustPanic("NewQuota -0.1", func() { NewQuota(-0.1, 0, 0) })
	mustPanic("NewQuota floor Inf", func() { NewQuota(0, math.Inf(1), 0) })
	mustPanic("NewQuota window 9ms", func() { NewQuota(0, 0, 9*time.Millisecond) })
	mustPanic("NewQuota window -1", func() { NewQuota(0, 0, -1) })
	// Accepted extremes.
	New(MaxAttempts(math.MaxInt), BaseDelay(math.MaxInt64), MaxDelay(math.MaxInt64), nil, WithSleep(nil), WithQuota(nil), RetryIf(nil), WithListener(nil))
	q := NewQuota(math.MaxFloat64, math.MaxFloat64, math.MaxInt64)
	if q.Available() != math.MaxInt || !q.Take() {
		t.Errorf("huge quota: available %d", q.Available())
	}
	var nilp *Policy
	if nilp.MaxAttempts() != 4 || nilp.MaxDelay() != 10*time.Second || nilp.Quota() != nil {
		t.Errorf("nil policy not New()")
	}
	if z := (&Policy{}).With(MaxAttempts(2)); z.MaxAttempts() != 2 || z.MaxDelay() != 10*time.Second {
		t.Errorf("zero policy With: %d %v", z.MaxAttempts(), z.MaxDelay())
	}
}

// Retry-After hints: a floor, capped at MaxDelay; a huge hint waits
// MaxDelay; a negative one (built by hand) is ignored; a hint past the
// deadline gives up at once.
func TestReview45RetryAfterHints(t *testing.T) {
	type tc struct {
		name  string
		hint  time.Duration
		raw   bool // a RetryAfterError literal, Delay not clamped
		maxD  time.Duration
		check func(d time.Duration) bool
	}
	cases := []tc{
		{"floor", 50 * time.Millisecond, false, time.Second, func(d time.Duration) bool { return d >= 50*time.Millisecond && d <= time.Second }},
		{"huge", math.MaxInt64, false, 2 * time.Second, func(d time.Duration) bool { return d == 2*time.Second }},
		{"past-max", 5 * time.Second, false, time.Second, func(d time.Duration) bool { return d == time.Second }},
		{"negative-raw", -time.Hour, true, time.Second, func(d time.Duration) bool { return d >= 0 && d <= time.Millisecond }},
		{"minint-raw", math.MinInt64, true, time.Second, func(d time.Duration) bool { return d >= 0 && d <= time.Millisecond }},
		{"zero", 0, false, time.Second, func(d time.Duration) bool { return d >= 0 && d <= time.Millisecond }},
	}
	for _, c := range cases {
		for range 200 {
			var slept []time.Duration
			var evDelay []time.Duration
			p := New(MaxAttempts(2), BaseDelay(time.Millisecond), MaxDelay(c.maxD),
				WithSleep(func(ctx context.Context, d time.Duration) error { slept = append(slept, d); return nil }),
				WithListener(resilience.ListenerFunc(func(e resilience.Event) {
					if e.Kind == resilience.EventRetry {
						evDelay = append(evDelay, e.Delay)
					}
				})))
			_, _ = Do(context.Background(), p, func(context.Context) (int, error) {
				var err error = errors.New("busy")
				if c.raw {
					err = &resilience.RetryAfterError{Err: err, Delay: c.hint}
				} else {
					err = resilience.RetryAfter(err, c.hint)
				}
				return 0, err
			})
			if len(slept) != 1 || !c.check(slept[0]) || len(evDelay) != 1 || evDelay[0] != slept[0] {
				t.Fatalf("%s: slept %v, events %v", c.name, slept, evDelay)
			}
		}
	}
	// A hint past the deadline: no sleep, out of time at once, with the last error.
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		start := time.Now()
		busy := errors.New("busy")
		_, err := Do(ctx, New(MaxAttempts(5), MaxDelay(time.Minute)), func(context.Context) (int, error) {
			return 0, resilience.RetryAfter(busy, 2*time.Second)
		})
		var e *Error
		if time.Since(start) != 0 || !errors.Is(err, ErrOutOfTime) || !errors.Is(err, busy) || !errors.As(err, &e) || e.Attempts != 1 {
			t.Fatalf("hint past deadline: %v after %v", err, time.Since(start))
		}
		// A hint past MaxDelay but with MaxDelay within the deadline: waits MaxDelay, retries.
		calls := 0
		start = time.Now()
		_, err = Do(ctx, New(MaxAttempts(2), MaxDelay(100*time.Millisecond)), func(context.Context) (int, error) {
			calls++
			if calls == 2 {
				return 1, nil
			}
			return 0, resilience.RetryAfter(busy, time.Hour)
		})
		if err != nil || time.Since(start) != 100*time.Millisecond {
			t.Fatalf("hint capped: %v after %v", err, time.Since(start))
		}
	})
}

func r45sat(a, b time.Duration) time.Duration {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}
