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

// TestThrottleForgetsOutsideItsWindow: after a window without attempts,
// an old overload throttles nothing.
func TestThrottleForgetsOutsideItsWindow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		th := throttle.New(throttle.Window(time.Second))
		for range 1000 {
			if tk, err := th.Admit(); err == nil {
				th.Done(tk, errOverloaded)
			}
		}
		assert.Greater(t, th.RejectProbability(), 0.9)
		time.Sleep(1100 * time.Millisecond)
		assert.Zero(t, th.RejectProbability())
		for range 100 {
			tk, err := th.Admit()
			assert.NoError(t, err)
			th.Done(tk, nil)
		}
	})
}

// TestCanceledAndRejectedAttemptsAreNotCounted: an attempt the caller
// canceled, or one not sent after all, is taken back: it is neither a
// request (which would throttle) nor an accept (which would hide an
// overload).
func TestCanceledAndRejectedAttemptsAreNotCounted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		th := throttle.New()
		send := func(n int, err error) {
			for range n {
				tk, aerr := th.Admit()
				if assert.NoError(t, aerr) {
					th.Done(tk, err)
				}
			}
		}
		send(20, nil)
		for range 50 {
			send(1, resilience.Rejected(errOverloaded))
			send(1, fmt.Errorf("gone: %w", context.Canceled))
			send(1, (*unwrapPanics)(nil)) // the caller's bug: teaches nothing
		}
		assert.Zero(t, th.RejectProbability(), "20 requests, 20 accepted")
		send(30, resilience.Permanent(errOverloaded)) // a 400 is an answer: accepted
		assert.Zero(t, th.RejectProbability())
		for range 50 {
			if tk, err := th.Admit(); err == nil {
				th.Done(tk, errOverloaded)
			} // a refusal is a request not accepted too
		}
		// 100 requests, 50 accepted: (100 - 2*(50+1))/101 is 0; had the
		// canceled or refused counted as requests, or as accepts, it
		// would differ.
		assert.Zero(t, th.RejectProbability())
		for range 3 {
			if tk, err := th.Admit(); err == nil {
				th.Done(tk, errOverloaded)
			}
		}
		assert.InDelta(t, 1.0/104, th.RejectProbability(), 1e-9)
	})
}

// unwrapPanics is an error whose Unwrap panics on a nil receiver, as a
// typed nil of a caller's error type may.
type unwrapPanics struct{ err error }

func (e *unwrapPanics) Error() string { return "unwrap panics" }
func (e *unwrapPanics) Unwrap() error { return e.err }

// TestRequestsCountAsTheyAreSent: attempts still in flight count, so that
// the throttle sees a burst as it goes out, not an attempt's duration
// later.
// TestRequestsCountAsTheyAreSent: attempts out count at once, as
// accepted at the rate the answered ones were: a burst to a dependency
// that has been failing is throttled as it goes out, a burst to a healthy
// one (or to one not heard from yet) is not.
func TestRequestsCountAsTheyAreSent(t *testing.T) {
	burst := func(th *throttle.Throttle) (p float64) {
		var tickets []throttle.Ticket
		for range 100 {
			if tk, err := th.Admit(); err == nil {
				tickets = append(tickets, tk)
			}
		}
		p = th.RejectProbability()
		for _, tk := range tickets {
			th.Done(tk, nil)
		}
		return p
	}
	assert.Zero(t, burst(throttle.New()), "nothing answered yet: a burst is no sign of refusals")

	healthy := throttle.New()
	for range 20 {
		tk, _ := healthy.Admit()
		healthy.Done(tk, nil)
	}
	assert.Zero(t, burst(healthy), "20 accepted of 20: the burst out is as good as accepted")

	failing := throttle.New()
	for range 20 {
		if tk, err := failing.Admit(); err == nil {
			failing.Done(tk, errOverloaded)
		}
	}
	assert.Greater(t, burst(failing), 0.85, "none accepted of those answered: the burst out counts against it as it goes")
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
					tk, err := th.Admit()
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
						th.Done(tk, errOverloaded)
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
	tk, err := th.Admit()
	assert.NoError(t, err)
	th.Done(tk, errOverloaded)
	assert.Zero(t, th.RejectProbability())
}

func TestThrottleCostsNoAllocation(t *testing.T) {
	th := throttle.New()
	assert.Zero(t, testing.AllocsPerRun(1000, func() {
		tk, _ := th.Admit()
		th.Done(tk, nil)
	}))
}

func TestNonsenseOptionsPanic(t *testing.T) {
	for _, k := range []float64{1.09, 1.01, 1, 0, 0.5, -1, math.NaN(), math.Inf(1)} {
		assert.PanicsWithValue(t, fmt.Sprintf("throttle: K(%v): k must be a finite number >= 1.1", k), func() { throttle.K(k) })
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
			if tk, err := th.Admit(); err == nil {
				th.Done(tk, nil)
			}
		}
	})
}

func TestWindowAtItsBound(t *testing.T) {
	assert.NotPanics(t, func() { throttle.New(throttle.Window(10 * time.Millisecond)) })
}
