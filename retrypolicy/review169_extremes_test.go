package retrypolicy_test

// review169: extreme option values of the retry policy and its quota.

import (
	"context"
	"errors"
	"fmt"
	"math"
	"testing"
	"testing/synctest"
	"time"

	"github.com/resiliencekit/resiliencekit/resilience"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

const r169Max = time.Duration(math.MaxInt64)

// TestReview169DelaysInRange: every delay of every jitter mode, for base
// and max delays at their extremes, lies in [0, MaxDelay] (the doc: "any
// value up to math.MaxInt64 works"), and Full/Equal/None stay under
// their cap min(base*2^n, max).
func TestReview169DelaysInRange(t *testing.T) {
	bases := []time.Duration{0, 1, 3, time.Millisecond, r169Max / 3, r169Max/2 - 1, r169Max / 2, r169Max/2 + 1, r169Max - 1, r169Max}
	maxes := []time.Duration{1, 2, time.Second, r169Max / 3, r169Max/2 + 1, r169Max - 1, r169Max}
	for _, j := range []retrypolicy.JitterMode{retrypolicy.Full, retrypolicy.Equal, retrypolicy.Decorrelated, retrypolicy.None} {
		for _, b := range bases {
			for _, m := range maxes {
				p := retrypolicy.New(retrypolicy.Jitter(j), retrypolicy.BaseDelay(b), retrypolicy.MaxDelay(m))
				i := 0
				capN := min(b, m)
				for d := range p.Delays() {
					if d < 0 || d > m {
						t.Fatalf("%v base %d max %d: delay %d = %d, outside [0, %d]", j, b, m, i, d, m)
					}
					slack := time.Duration(float64(capN) * 1e-12) // float64 doubling in backoff/v4: exact to 2^53 ns only
					if j != retrypolicy.Decorrelated && d-capN > slack {
						t.Fatalf("%v base %d max %d: delay %d = %d above its cap %d", j, b, m, i, d, capN)
					}
					if j == retrypolicy.None && (capN-d > slack || d-capN > slack) {
						t.Fatalf("None base %d max %d: delay %d = %d, want the cap %d", b, m, i, d, capN)
					}
					if j == retrypolicy.Decorrelated && b > 0 && d < min(b, m) {
						t.Fatalf("Decorrelated base %d max %d: delay %d = %d below base", b, m, i, d)
					}
					if capN > m/2 {
						capN = m
					} else {
						capN *= 2
					}
					if i++; i == 130 {
						break
					}
				}
			}
		}
	}
}

// TestReview169RetryAfterHintExtremes: a hint of MaxInt64 (or negative) is
// capped at MaxDelay and never makes a negative sleep.
func TestReview169RetryAfterHintExtremes(t *testing.T) {
	for _, hint := range []time.Duration{-r169Max, -1, 0, 1, r169Max - 1, r169Max} {
		for _, m := range []time.Duration{1, time.Second, r169Max} {
			t.Run(fmt.Sprintf("hint=%d/max=%d", hint, m), func(t *testing.T) {
				var slept []time.Duration
				p := retrypolicy.New(retrypolicy.MaxAttempts(3), retrypolicy.MaxDelay(m), retrypolicy.BaseDelay(0),
					retrypolicy.WithSleep(func(_ context.Context, d time.Duration) error { slept = append(slept, d); return nil }))
				n := 0
				_, err := retrypolicy.Do(context.Background(), p, func(context.Context) (int, error) {
					if n++; n < 3 {
						return 0, resilience.RetryAfter(errors.New("busy"), hint)
					}
					return 1, nil
				})
				if err != nil {
					t.Fatal(err)
				}
				for _, d := range slept {
					if d < 0 || d > m {
						t.Fatalf("slept %d with hint %d and MaxDelay %d", d, hint, m)
					}
				}
			})
		}
	}
}

// TestReview169QuotaExtremes: quotas at the extremes of their accepted
// values: Available and Take never panic, agree, and Available is never
// negative; NaN never appears (a zero quota allows nothing, a huge one
// everything).
func TestReview169QuotaExtremes(t *testing.T) {
	cases := []struct {
		ratio, floor float64
		window       time.Duration
		wantAny      bool // at least one retry allowed after 10 calls
		wantAll      bool // every Take succeeds
	}{
		{0, 0, 0, false, false},
		{0, 0, r169Max, false, false},
		{1e-300, 1e-300, 10 * time.Millisecond, false, false},
		{5e-324, 5e-324, r169Max, false, false},
		{math.MaxFloat64, 0, 0, true, true},
		{0, math.MaxFloat64, 0, true, true},
		{math.MaxFloat64, math.MaxFloat64, r169Max, true, true},
		{1e308, 1e308, r169Max, true, true},
		{0, 1e300, r169Max, true, true}, // floor*seconds overflows to +Inf
		{1, 0, 10 * time.Millisecond, true, false},
	}
	for _, tc := range cases {
		t.Run(fmt.Sprintf("%g/%g/%v", tc.ratio, tc.floor, tc.window), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				q := retrypolicy.NewQuota(tc.ratio, tc.floor, tc.window)
				// 10 calls through a policy to fund it
				p := retrypolicy.New(retrypolicy.WithQuota(q))
				for range 10 {
					if _, err := retrypolicy.Do(context.Background(), p, func(context.Context) (int, error) { return 1, nil }); err != nil {
						t.Fatal(err)
					}
				}
				a := q.Available()
				if a < 0 {
					t.Fatalf("Available %d", a)
				}
				took := 0
				for range 1000 {
					before := q.Available()
					ok := q.Take()
					if ok != (before >= 1) {
						t.Fatalf("Take %v with Available %d before it", ok, before)
					}
					if !ok {
						break
					}
					took++
				}
				if tc.wantAny && took == 0 {
					t.Fatalf("no retry allowed, Available %d", a)
				}
				if !tc.wantAny && took > 0 {
					t.Fatalf("%d retries allowed by a zero/tiny quota", took)
				}
				if tc.wantAll && took != 1000 {
					t.Fatalf("only %d of 1000 retries allowed by a huge quota", took)
				}
			})
		})
	}
}

// TestReview169MaxAttemptsHuge: MaxAttempts(MaxInt) and the loop with
// BaseDelay(0): bounded by the context, never an overflow of the attempt
// count's checks (Resume's e.Attempts >= MaxInt-1).
func TestReview169MaxAttemptsHuge(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := retrypolicy.New(retrypolicy.MaxAttempts(math.MaxInt), retrypolicy.BaseDelay(0))
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		n := 0
		got, err := retrypolicy.Do(ctx, p, func(context.Context) (int, error) {
			if n++; n < 10000 {
				return 0, errors.New("transient")
			}
			return n, nil
		})
		if err != nil || got != 10000 {
			t.Fatalf("%d, %v", got, err)
		}
	})
}

// TestReview169BudgetLookAheadMax: a context deadline far in the future
// and a delay near MaxInt64: the look-ahead (now+delay before deadline)
// must not wrap: it gives up with ErrOutOfTime if the delay does not
// fit, sleeps otherwise.
func TestReview169BudgetLookAheadMax(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var slept []time.Duration
		p := retrypolicy.New(retrypolicy.MaxAttempts(3), retrypolicy.Jitter(retrypolicy.None), retrypolicy.BaseDelay(r169Max), retrypolicy.MaxDelay(r169Max),
			retrypolicy.WithSleep(func(_ context.Context, d time.Duration) error { slept = append(slept, d); return nil }))
		ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
		defer cancel()
		_, err := retrypolicy.Do(ctx, p, func(context.Context) (int, error) { return 0, errors.New("transient") })
		if !errors.Is(err, retrypolicy.ErrOutOfTime) || len(slept) != 0 {
			t.Fatalf("a delay of 292 years within a 1 h deadline: err %v, slept %v", err, slept)
		}
	})
}
