package retrypolicy

import (
	"context"
	"errors"
	"math"
	"testing"
	"testing/synctest"
	"time"
)

func review131Draws(p *Policy, n int) []time.Duration {
	var out []time.Duration
	for d := range p.Delays() {
		out = append(out, d)
		if len(out) == n {
			break
		}
	}
	return out
}

// Full and Equal: each draw within its documented range, and the mean of
// many draws at retry n close to cap(n)/2 (full) and 3cap(n)/4 (equal).
func TestReview131JitterFullEqualMeans(t *testing.T) {
	base, maxD := 100*time.Millisecond, 10*time.Second
	for _, m := range []JitterMode{Full, Equal, None} {
		p := New(Jitter(m), BaseDelay(base), MaxDelay(maxD))
		const runs, depth = 20000, 10
		sums := make([]float64, depth)
		for range runs {
			for n, d := range review131Draws(p, depth) {
				c := min(base<<n, maxD)
				lo := time.Duration(0)
				switch m {
				case Equal:
					lo = c / 2
				case None:
					lo = c
				}
				if d < lo || d > c {
					t.Fatalf("%v retry %d: %v outside [%v, %v]", m, n, d, lo, c)
				}
				sums[n] += float64(d)
			}
		}
		for n := range depth {
			c := float64(min(base<<n, maxD))
			want := map[JitterMode]float64{Full: c / 2, Equal: 3 * c / 4, None: c}[m]
			got := sums[n] / runs
			if math.Abs(got-want)/want > 0.02 {
				t.Errorf("%v retry %d: mean %v, want %v", m, n, time.Duration(got), time.Duration(want))
			}
		}
	}
}

// Decorrelated: each draw within [BaseDelay, min(3*prev, MaxDelay)]; the
// first draw's mean is 2*BaseDelay; the stationary share below MaxDelay
// as the doc says.
func TestReview131Decorrelated(t *testing.T) {
	for _, c := range []struct{ base, max time.Duration }{
		{100 * time.Millisecond, 10 * time.Second},
		{time.Millisecond, time.Millisecond},
		{time.Second, time.Millisecond}, // base over max
		{0, time.Second},
		{1, 2},
		{time.Duration(math.MaxInt64 / 2), time.Duration(math.MaxInt64)},
		{time.Duration(math.MaxInt64), time.Duration(math.MaxInt64)},
	} {
		p := New(Jitter(Decorrelated), BaseDelay(c.base), MaxDelay(c.max))
		var firstSum float64
		const runs = 20000
		below, atTail := 0, 0
		for range runs {
			prev := c.base
			for n, d := range review131Draws(p, 30) {
				lo := min(c.base, c.max)
				hi := c.max
				if prev <= math.MaxInt64/3 {
					hi = min(3*prev, c.max)
				}
				hi = max(hi, lo)
				if d < lo || d > hi {
					t.Fatalf("%+v retry %d: %v outside [%v, %v] (prev %v)", c, n, d, lo, hi, prev)
				}
				if n == 0 {
					firstSum += float64(d)
				}
				if n >= 20 {
					atTail++
					if d < c.max {
						below++
					}
				}
				prev = d
			}
		}
		if c.base == 100*time.Millisecond {
			if got := firstSum / runs; math.Abs(got-float64(2*c.base))/float64(2*c.base) > 0.02 {
				t.Errorf("first decorrelated delay mean %v, want %v", time.Duration(got), 2*c.base)
			}
			// doc: once at MaxDelay, next below with probability (M-B)/(3M-B)
			// (a stationary share is higher, since a draw below M may
			// draw below again); the doc claims "about a third" for the
			// next draw only; log the tail share.
			t.Logf("share below MaxDelay in the tail: %.3f", float64(below)/float64(atTail))
		}
	}
}

// The time budget: no delay ends at or past the deadline, and with a
// retry-after hint longer than the remaining budget the call gives up at
// once with ErrOutOfTime.
func TestReview131BudgetNeverSleepsPast(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		for _, m := range []JitterMode{Full, Equal, Decorrelated, None} {
			for range 200 {
				ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
				deadline, _ := ctx.Deadline()
				p := New(Jitter(m), MaxAttempts(0), BaseDelay(100*time.Millisecond), MaxDelay(2*time.Second),
					WithSleep(func(ctx context.Context, d time.Duration) error {
						if !time.Now().Add(d).Before(deadline) {
							t.Errorf("%v: sleeping %v with %v left", m, d, time.Until(deadline))
						}
						return sleep(ctx, d)
					}))
				attempts := 0
				_, err := Do(ctx, p, func(ctx context.Context) (int, error) {
					attempts++
					time.Sleep(10 * time.Millisecond)
					return 0, errReview131Reset
				})
				if !errors.Is(err, ErrOutOfTime) {
					t.Errorf("%v: %v", m, err)
				}
				cancel()
			}
		}
	})
}

// A retry whose delay ends just before the deadline is sent, with what is
// left (docs/retries.md says so: the loop does not know how long an
// answer takes); its delay never passes the deadline.
func TestReview131RetryWithLittleTimeLeft(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond+time.Microsecond)
		defer cancel()
		p := New(Jitter(None), BaseDelay(100*time.Millisecond), MaxAttempts(2))
		var lefts []time.Duration
		_, _ = Do(ctx, p, func(ctx context.Context) (int, error) {
			dl, _ := ctx.Deadline()
			lefts = append(lefts, time.Until(dl))
			return 0, errReview131Reset
		})
		if len(lefts) != 2 || lefts[1] != time.Microsecond {
			t.Errorf("attempts with %v left, want the retry sent with 1µs", lefts)
		}
	})
}
