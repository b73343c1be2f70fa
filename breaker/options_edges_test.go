package breaker_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/resilience"
)

// TestOptionsAcceptTheirBounds: the edges of what each option documents
// as valid are accepted, not refused with a panic.
func TestOptionsAcceptTheirBounds(t *testing.T) {
	for name, opt := range map[string]func() breaker.Option{
		"a failure rate of 1":                   func() breaker.Option { return breaker.FailureRate(1, 10) },
		"a window of 0":                         func() breaker.Option { return breaker.Window(0, 10) },
		"one bucket":                            func() breaker.Option { return breaker.Window(time.Second, 1) },
		"MaxBuckets buckets":                    func() breaker.Option { return breaker.Window(time.Second, breaker.MaxBuckets) },
		"buckets of exactly a millisecond":      func() breaker.Option { return breaker.Window(10*time.Millisecond, 10) },
		"an open timeout of a nanosecond":       func() breaker.Option { return breaker.OpenTimeout(time.Nanosecond) },
		"a flush interval of a nanosecond":      func() breaker.Option { return breaker.FlushInterval(time.Nanosecond) },
		"HalfOpenRequests(0), which means 1":    func() breaker.Option { return breaker.HalfOpenRequests(0) },
		"FailureRate's minimum of 0, meaning 1": func() breaker.Option { return breaker.FailureRate(0.5, 0) },
	} {
		t.Run(name, func(t *testing.T) {
			require.NotPanics(t, func() { breaker.New("x", opt()) })
		})
	}
}

// TestFailureRateThresholds: the rate opens the breaker when at least
// minRequests calls have ended and the failures among them reach the
// ratio, both bounds included; it is checked on a failure.
func TestFailureRateThresholds(t *testing.T) {
	tests := []struct {
		name     string
		ratio    float64
		min      uint32
		outcomes string // f: a failure, s: a success, in order
		opens    bool
	}{
		{"exactly the ratio at exactly the minimum", 0.5, 4, "ssff", true},
		{"below the ratio at the minimum", 0.5, 4, "sssf", false},
		{"the ratio one call short of the minimum", 0.5, 4, "sff", false},
		{"a ratio of 1 needs every call failed", 1, 3, "sfff", false},
		{"a ratio of 1, every call failed", 1, 3, "fff", true},
		{"a minimum of 0 is 1", 1, 0, "f", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := breaker.New("x", breaker.ConsecutiveFailures(0), breaker.FailureRate(tt.ratio, tt.min))
			for _, o := range tt.outcomes {
				_ = b.Execute(context.Background(), func(context.Context) error {
					if o == 'f' {
						return errDown
					}
					return nil
				})
			}
			assert.Equal(t, tt.opens, b.State() == resilience.StateOpen)
		})
	}
}

// TestWindowRollsBucketByBucket: a window of 10 s in 10 buckets forgets
// a second's calls at a time: at 10.5 s the successes of 0 s are out and
// the failures of 9 s and 10.5 s are in (2 of 2: it opens), where a window
// cleared every 10 s would hold one failure.
func TestWindowRollsBucketByBucket(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := breaker.New("x", breaker.ConsecutiveFailures(0), breaker.FailureRate(0.5, 2), breaker.Window(10*time.Second, 10))
		start := time.Now()
		calls(b, 2, ok)
		at(start, 9*time.Second)
		calls(b, 1, failed)
		require.Equal(t, resilience.StateClosed, b.State(), "1 of 3")
		at(start, 10500*time.Millisecond)
		calls(b, 1, failed)
		assert.Equal(t, resilience.StateOpen, b.State())
	})
}

// TestDefaultOpenTimeout: a breaker made with no option stays open 100 ms
// (docs/storm.md chose it), and is half-open just after.
func TestDefaultOpenTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := breaker.New("x")
		calls(b, 5, failed)
		require.Equal(t, resilience.StateOpen, b.State())
		time.Sleep(100 * time.Millisecond)
		assert.Equal(t, resilience.StateOpen, b.State())
		time.Sleep(time.Nanosecond)
		assert.Equal(t, resilience.StateHalfOpen, b.State())
	})
}
