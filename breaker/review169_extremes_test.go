package breaker_test

// review169: extreme breaker options.

import (
	"context"
	"errors"
	"fmt"
	"math"
	"testing"
	"testing/synctest"
	"time"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/resilience"
)

const r169Max = time.Duration(math.MaxInt64)

var r169Windows = []struct {
	d time.Duration
	n int
}{
	{0, 1}, {0, 100}, {time.Millisecond, 1}, {100 * time.Millisecond, 100}, {time.Second, 7}, {r169Max, 1}, {r169Max, 100}, {r169Max - 1, 99},
}

// TestReview169HealthyNeverOpens: with any window and any thresholds, a
// healthy dependency is never refused, with time passing (up to years).
func TestReview169HealthyNeverOpens(t *testing.T) {
	for _, w := range r169Windows {
		for _, thr := range []breaker.Option{breaker.ConsecutiveFailures(0), breaker.ConsecutiveFailures(1), breaker.FailureRate(5e-324, 0), breaker.FailureRate(1, math.MaxUint32)} {
			t.Run(fmt.Sprintf("%d/%d", w.d, w.n), func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					b := breaker.New("r169", breaker.Window(w.d, w.n), thr, breaker.OpenTimeout(r169Max), breaker.HalfOpenRequests(math.MaxUint32))
					gaps := []time.Duration{0, time.Nanosecond, time.Millisecond, time.Second, time.Hour, 24 * time.Hour * 365}
					for i := range 300 {
						if err := b.Execute(context.Background(), func(context.Context) error { return nil }); err != nil {
							t.Fatalf("call %d: %v", i, err)
						}
						time.Sleep(gaps[i%len(gaps)])
					}
					if b.State() != resilience.StateClosed {
						t.Fatalf("state %v", b.State())
					}
				})
			})
		}
	}
}

// TestReview169ThresholdsAtExtremes: the thresholds trip exactly as the
// docs say, whatever the window (calls in one instant).
func TestReview169ThresholdsAtExtremes(t *testing.T) {
	boom := errors.New("boom")
	fail := func(b *breaker.Breaker, n int) {
		for range n {
			_ = b.Execute(context.Background(), func(context.Context) error { return boom })
		}
	}
	ok := func(b *breaker.Breaker, n int) {
		for range n {
			_ = b.Execute(context.Background(), func(context.Context) error { return nil })
		}
	}
	for _, w := range r169Windows {
		t.Run(fmt.Sprintf("%d/%d", w.d, w.n), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				win := breaker.Window(w.d, w.n)
				// ConsecutiveFailures(1): one failure opens it.
				b := breaker.New("a", win, breaker.ConsecutiveFailures(1))
				fail(b, 1)
				if b.State() != resilience.StateOpen {
					t.Fatalf("ConsecutiveFailures(1): %v after one failure", b.State())
				}
				// ConsecutiveFailures(0), no rate: never opens.
				b = breaker.New("b", win, breaker.ConsecutiveFailures(0))
				fail(b, 500)
				if b.State() != resilience.StateClosed {
					t.Fatalf("ConsecutiveFailures(0): %v", b.State())
				}
				// FailureRate(tiny, 0): min 1, any failure opens it.
				b = breaker.New("c", win, breaker.ConsecutiveFailures(0), breaker.FailureRate(5e-324, 0))
				ok(b, 100)
				fail(b, 1)
				if b.State() != resilience.StateOpen {
					t.Fatalf("FailureRate(5e-324, 0): %v after 100 successes and a failure", b.State())
				}
				// FailureRate(1, 2): opens only when all of >= 2 failed.
				b = breaker.New("d", win, breaker.ConsecutiveFailures(0), breaker.FailureRate(1, 2))
				fail(b, 1)
				if b.State() != resilience.StateClosed {
					t.Fatalf("FailureRate(1, 2) after 1 call: %v", b.State())
				}
				fail(b, 1)
				if b.State() != resilience.StateOpen {
					t.Fatalf("FailureRate(1, 2) after 2 failures: %v", b.State())
				}
				// OpenTimeout(max): open for good; OpenTimeout(1ns): half-open at once.
				b = breaker.New("e", win, breaker.ConsecutiveFailures(1), breaker.OpenTimeout(r169Max))
				fail(b, 1)
				time.Sleep(24 * time.Hour * 365 * 100)
				if b.State() != resilience.StateOpen {
					t.Fatalf("OpenTimeout(max): %v after 100 years", b.State())
				}
				if np := b.NextProbe(); np.Before(time.Now()) {
					t.Fatalf("OpenTimeout(max): NextProbe %v is in the past (now %v)", np, time.Now())
				}
				b = breaker.New("f", win, breaker.ConsecutiveFailures(1), breaker.OpenTimeout(1))
				fail(b, 1)
				time.Sleep(2)
				if err := b.Execute(context.Background(), func(context.Context) error { return nil }); err != nil {
					t.Fatalf("OpenTimeout(1ns): probe refused: %v", err)
				}
				if b.State() != resilience.StateClosed {
					t.Fatalf("OpenTimeout(1ns): %v after a successful probe", b.State())
				}
			})
		})
	}
}

// TestReview169HalfOpenMax: HalfOpenRequests(MaxUint32) lets every probe
// through (a healthy dependency is never refused while half-open).
func TestReview169HalfOpenMax(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := breaker.New("r169", breaker.ConsecutiveFailures(1), breaker.OpenTimeout(time.Millisecond), breaker.HalfOpenRequests(math.MaxUint32))
		_ = b.Execute(context.Background(), func(context.Context) error { return errors.New("boom") })
		time.Sleep(2 * time.Millisecond)
		for i := range 1000 {
			if err := b.Execute(context.Background(), func(context.Context) error { return nil }); err != nil {
				t.Fatalf("probe %d refused: %v", i, err)
			}
		}
	})
}
