package throttle_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/resiliencekit/resiliencekit/resilience"
	"github.com/resiliencekit/resiliencekit/throttle"
)

var errOverloaded = errors.New("503")

func TestRejectProbabilityFollowsTheFormula(t *testing.T) {
	tests := []struct {
		requests, accepts int
		k                 float64
	}{
		{100, 100, 2}, {100, 50, 2}, {100, 40, 2}, {100, 10, 2}, {100, 0, 2},
		{100, 60, 1.5}, {100, 0, 1}, {1000, 0, 2},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%d/%d K=%v", tt.accepts, tt.requests, tt.k), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				th := throttle.New(throttle.K(tt.k), throttle.Window(time.Second))
				for i := range tt.requests {
					var err error
					if i >= tt.accepts {
						err = errOverloaded
					}
					th.Done(err)
					time.Sleep(time.Second / 2000)
				}
				want := max(0, (float64(tt.requests)-tt.k*float64(tt.accepts))/float64(tt.requests+1))
				assert.InDelta(t, want, th.RejectProbability(), 1e-9)
			})
		})
	}
}

// TestThrottleForgetsOutsideItsWindow: after a window without attempts,
// an old overload throttles nothing.
func TestThrottleForgetsOutsideItsWindow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		th := throttle.New(throttle.Window(time.Second))
		for range 1000 {
			th.Done(errOverloaded)
		}
		assert.Greater(t, th.RejectProbability(), 0.99)
		time.Sleep(1100 * time.Millisecond)
		assert.Zero(t, th.RejectProbability())
		for range 100 {
			assert.NoError(t, th.Admit())
			th.Done(nil)
		}
	})
}

func TestCanceledAndRejectedAttemptsAreNotCounted(t *testing.T) {
	th := throttle.New()
	for range 100 {
		th.Done(resilience.Rejected(errOverloaded))
		th.Done(fmt.Errorf("gone: %w", context.Canceled))
	}
	assert.Zero(t, th.RejectProbability())
	th.Done(resilience.Permanent(errOverloaded)) // a 400 is an answer: accepted
	assert.Zero(t, th.RejectProbability())
}

func TestThrottleUnderManyGoroutines(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		th := throttle.New(throttle.Window(time.Second))
		var mu sync.Mutex
		admitted, throttled := 0, 0
		var wg sync.WaitGroup
		for range 50 {
			wg.Go(func() {
				for range 200 {
					err := th.Admit()
					mu.Lock()
					if err != nil {
						assert.ErrorIs(t, err, throttle.ErrThrottled)
						assert.Equal(t, resilience.ClassRejected, resilience.Classify(err))
						throttled++
					} else {
						admitted++
					}
					mu.Unlock()
					if err == nil {
						th.Done(errOverloaded)
					}
					time.Sleep(time.Millisecond)
				}
			})
		}
		wg.Wait()
		// Nothing accepted: after the first attempts, nearly all are refused.
		assert.Less(t, admitted, 1000)
		assert.Equal(t, 10000, admitted+throttled)
	})
}

func TestNilThrottleAdmitsEverything(t *testing.T) {
	var th *throttle.Throttle
	assert.NoError(t, th.Admit())
	th.Done(errOverloaded)
	assert.Zero(t, th.RejectProbability())
}

func TestThrottleCostsNoAllocation(t *testing.T) {
	th := throttle.New()
	assert.Zero(t, testing.AllocsPerRun(1000, func() {
		_ = th.Admit()
		th.Done(nil)
	}))
}

func TestNonsenseOptionsPanic(t *testing.T) {
	for _, k := range []float64{0, 0.5, -1, math.NaN(), math.Inf(1)} {
		assert.PanicsWithValue(t, fmt.Sprintf("throttle: K(%v): k must be a finite number >= 1", k), func() { throttle.K(k) })
	}
	for _, d := range []time.Duration{0, -time.Second, time.Millisecond} {
		assert.PanicsWithValue(t, fmt.Sprintf("throttle: Window(%v): d must be at least 10ms", d), func() { throttle.Window(d) })
	}
}

func BenchmarkThrottle(b *testing.B) {
	th := throttle.New()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if th.Admit() == nil {
				th.Done(nil)
			}
		}
	})
}
