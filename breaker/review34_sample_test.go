package breaker_test

import (
	"context"
	"math/rand/v2"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/resilience"
)

// review34SampledTrial runs, in a synctest bubble, a minute of traffic to
// a healthy dependency through one default breaker: a fast request every
// 50 ms (200 a span of 10 s, so past the first 16 timed), and a slow
// request, by a caller without a deadline, every slowEvery. Then 5
// requests for the slow path arrive at once with a 300 ms budget (three
// times the 100 ms floor, less than the 400 ms the dependency's slow
// answers took all minute). It reports whether the breaker opened, and
// whether the next slow request without a deadline, which a plain client
// completes, was rejected.
func review34SampledTrial(t *testing.T, slowEvery time.Duration) (opened, rejected bool) {
	synctest.Test(t, func(t *testing.T) {
		// A random phase: the bubble's clock starts at the same instant in
		// every trial, and the breaker seeds its draws from it.
		time.Sleep(time.Duration(rand.Int64N(int64(20 * time.Second))))
		b := breaker.New("dep")
		time.Sleep(time.Duration(rand.Int64N(int64(time.Second))))
		ctx := context.Background()
		stop := make(chan struct{})
		var wg sync.WaitGroup
		wg.Go(func() {
			tk := time.NewTicker(50 * time.Millisecond)
			defer tk.Stop()
			for {
				select {
				case <-stop:
					return
				case <-tk.C:
					wg.Go(func() { _ = b.Execute(ctx, answerIn(10*time.Millisecond)) })
				}
			}
		})
		wg.Go(func() {
			tk := time.NewTicker(slowEvery)
			defer tk.Stop()
			for {
				select {
				case <-stop:
					return
				case <-tk.C:
					wg.Go(func() {
						if err := b.Execute(ctx, answerIn(400*time.Millisecond)); err != nil {
							t.Errorf("slow call without deadline failed during warm-up: %v", err)
						}
					})
				}
			}
		})
		time.Sleep(time.Minute)
		close(stop)
		synctest.Wait()
		time.Sleep(time.Second) // every answer in
		synctest.Wait()

		var burst sync.WaitGroup
		for range 5 {
			burst.Go(func() {
				cctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
				defer cancel()
				_ = b.Execute(cctx, answerIn(400*time.Millisecond))
			})
		}
		burst.Wait()
		opened = b.State() != resilience.StateClosed
		err := b.Execute(ctx, answerIn(400*time.Millisecond))
		rejected = breaker.IsRejection(err)
		wg.Wait()
	})
	return opened, rejected
}

// TestReview34SampledBarMissesTheSlowAnswers: the package doc says a call
// cut short by its caller's deadline is left out "if it had less time
// than the dependency's answers may take: the slowest answer of the last
// minute". The dependency's slow answers took 400 ms all minute (5 or 2
// of them every 10 s, among 200 fast ones), yet the bar, sampled one in
// 16 past the first 16 of each 10 s, often never saw one: 5 calls that
// had 300 ms then open the healthy dependency's breaker, and a call
// without a deadline (that a plain client completes in 400 ms) is
// rejected.
func TestReview34SampledBarMissesTheSlowAnswers(t *testing.T) {
	for _, every := range []time.Duration{2 * time.Second, 5 * time.Second} {
		const trials = 30
		opened, rejected := 0, 0
		for range trials {
			o, r := review34SampledTrial(t, every)
			if o {
				opened++
			}
			if r {
				rejected++
			}
		}
		t.Logf("slow answer every %v: breaker opened in %d of %d trials; the next call without a deadline rejected in %d", every, opened, trials, rejected)
		assert.Zero(t, rejected, "slow answer every %v: a healthy dependency's call without a deadline was rejected in %d of %d trials", every, rejected, trials)
	}
}

// TestReview34BarForgetsWithinAMinute: the doc says the bar is "the
// slowest answer of the last minute" and that the breaker "keeps the
// slowest of each 10 s for a minute". One slow answer (400 ms, a call
// without a deadline) at t0; 52 s later, 5 calls with a 300 ms budget
// are cut short. 52 s is within the minute, so they should be left out;
// the bar, kept by spans of 10 s counted back from the cut call's span,
// has forgotten the answer when t0 fell late in its span (about 1 trial
// in 5), and the healthy dependency's breaker opens.
func TestReview34BarForgetsWithinAMinute(t *testing.T) {
	const trials = 40
	opened := 0
	for range trials {
		synctest.Test(t, func(t *testing.T) {
			time.Sleep(time.Duration(rand.Int64N(int64(20 * time.Second))))
			b := breaker.New("dep")
			ctx := context.Background()
			time.Sleep(time.Duration(rand.Int64N(int64(10 * time.Second))))
			assert.NoError(t, b.Execute(ctx, answerIn(400*time.Millisecond)))
			time.Sleep(52*time.Second - 400*time.Millisecond)
			var burst sync.WaitGroup
			for range 5 {
				burst.Go(func() {
					cctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
					defer cancel()
					_ = b.Execute(cctx, answerIn(400*time.Millisecond))
				})
			}
			burst.Wait()
			if b.State() != resilience.StateClosed {
				opened++
			}
		})
	}
	t.Logf("a 400 ms answer 52 s before: 5 calls that had 300 ms opened the breaker in %d of %d trials", opened, trials)
	assert.Zero(t, opened)
}
