package throttle_test

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/resiliencekit/resiliencekit/throttle"
)

// TestReview21OneFailureAtColdStartLocksOutAHealthyDependency, from a
// review. The package doc: "while the dependency accepts at least one
// attempt in K nothing is refused", and "attempts still out count among
// the accepts at the rate the dependency has been accepting the answered
// ones ... so that a burst to a healthy dependency is not taken for
// refusals". 64 workers in a closed loop (each takes the next job as soon
// as its call ends, as a queue consumer does) start on a cold throttle
// (window 1 s here; 10 s by default) against a dependency that answers in
// 2 ms and fails exactly once, at once: its first answer (a reset, or a
// fast 503). From then on it
// accepts every attempt.
//
// With one answer known, a failure, the 63 attempts out count as accepts
// at its rate: 0. The throttle refuses at 63/65; the worker whose call
// failed is refused at once, takes the next job, is refused again..., and
// each refusal counts as a request: within a millisecond the window holds
// thousands of requests against a few dozen accepts, and the throttle
// refuses nearly every call of a dependency that accepts every attempt,
// for many windows (the share let through grows by about K a window).
func TestReview21OneFailureAtColdStartLocksOutAHealthyDependency(t *testing.T) {
	const workers, window = 64, time.Second
	th := throttle.New(throttle.Window(window))
	var failedOnce atomic.Bool
	fail := errors.New("503")
	start := time.Now()
	const slices = 10 // of half a window each
	var admitted, refused [slices]atomic.Int64
	var wg sync.WaitGroup
	var ready sync.WaitGroup
	ready.Add(workers)
	for range workers {
		wg.Go(func() {
			ready.Done()
			ready.Wait()
			for {
				i := int(time.Since(start) / (window / 2))
				if i >= slices {
					return
				}
				tk, err := th.Admit()
				if err != nil {
					refused[i].Add(1)
					continue // the next job
				}
				admitted[i].Add(1)
				if failedOnce.CompareAndSwap(false, true) {
					th.Done(tk, fail) // the dependency's one failure, a fast one (a reset, a 503)
					continue
				}
				time.Sleep(2 * time.Millisecond)
				th.Done(tk, nil)
			}
		})
	}
	wg.Wait()
	table, totalRefused, total := review21Slices(admitted[:], refused[:], window)
	t.Logf("one failure, then every attempt accepted; window %v:%s", window, table)
	// A plain client refuses nothing; allow the throttle a little noise.
	assert.Less(t, float64(totalRefused)/float64(total), 0.01, "calls refused to a dependency that failed once")
}

// TestReview21OneFailureAtColdStartOpenLoop is the same lockout without
// a closed loop: calls arrive at a steady 2,000 a second whatever becomes
// of them, as at a web service, each its own goroutine. The dependency
// answers in 5 ms and fails once: its first answer, at once. Refused
// arrivals count as requests and the few admitted ones are the only
// accepts: the share let through grows by about K a window from there.
func TestReview21OneFailureAtColdStartOpenLoop(t *testing.T) {
	const window = time.Second
	th := throttle.New(throttle.Window(window))
	var failedOnce atomic.Bool
	fail := errors.New("503")
	const slices = 6
	var admitted, refused [slices]atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	tick := time.NewTicker(500 * time.Microsecond)
	defer tick.Stop()
	for range tick.C {
		i := int(time.Since(start) / (window / 2))
		if i >= slices {
			break
		}
		wg.Go(func() {
			tk, err := th.Admit()
			if err != nil {
				refused[i].Add(1)
				return
			}
			admitted[i].Add(1)
			if failedOnce.CompareAndSwap(false, true) {
				th.Done(tk, fail)
				return
			}
			time.Sleep(5 * time.Millisecond)
			th.Done(tk, nil)
		})
	}
	wg.Wait()
	table, totalRefused, _ := review21Slices(admitted[:], refused[:], window)
	t.Logf("open loop, one failure, then every attempt accepted; window %v:%s", window, table)
	assert.Zero(t, totalRefused, "calls refused to a dependency that failed once (a plain client refuses none)")
}

// review21Slices tabulates the attempts admitted and refused in each half
// window, and returns the table and the totals refused and made.
func review21Slices(admitted, refused []atomic.Int64, window time.Duration) (table string, totalRefused, total int64) {
	var b strings.Builder
	for i := range admitted {
		a, r := admitted[i].Load(), refused[i].Load()
		totalRefused += r
		total += a + r
		fmt.Fprintf(&b, "\n  %4v-%4v: %6d admitted, %8d refused (%.1f%%)", time.Duration(i)*window/2, time.Duration(i+1)*window/2, a, r, 100*float64(r)/float64(max(a+r, 1)))
	}
	return b.String(), totalRefused, total
}
