package pipeline_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/hedge"
	"github.com/resiliencekit/resiliencekit/limit"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/resilience"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
	"github.com/resiliencekit/resiliencekit/throttle"
)

var errOverloaded = errors.New("503")

// tail answers in 8-12 ms, and one time in 50 in 100-150 ms: p99 over
// 10 times p50, as in "The Tail at Scale".
func tail(sent *atomic.Int64) resilience.Operation[int] {
	return func(ctx context.Context) (int, error) {
		sent.Add(1)
		d := 8*time.Millisecond + rand.N(4*time.Millisecond)
		if rand.N(50) == 0 {
			d = 100*time.Millisecond + rand.N(50*time.Millisecond)
		}
		select {
		case <-time.After(d):
			return 1, nil
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
}

// latencies makes 2000 calls from 20 goroutines and returns their sorted
// latencies.
func latencies(t *testing.T, p *pipeline.Pipeline, op resilience.Operation[int]) []time.Duration {
	var mu sync.Mutex
	var out []time.Duration
	var wg sync.WaitGroup
	for range 20 {
		wg.Go(func() {
			for range 100 {
				start := time.Now()
				_, err := pipeline.Do(t.Context(), p, op)
				assert.NoError(t, err)
				mu.Lock()
				out = append(out, time.Since(start))
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	slices.Sort(out)
	return out
}

func TestHedgingCutsTheTail(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var plainSent, hedgedSent atomic.Int64
		plain := latencies(t, pipeline.New(), tail(&plainSent))
		hedged := latencies(t, pipeline.New(pipeline.WithHedging(hedge.New(hedge.Quantile(0.95)))), tail(&hedgedSent))

		p50, p99 := plain[len(plain)/2], plain[len(plain)*99/100]
		require.GreaterOrEqual(t, p99, 10*p50, "the backend's tail: p99 %v, p50 %v", p99, p50)
		hp99 := hedged[len(hedged)*99/100]
		t.Logf("p50 %v, p99 %v; hedged p99 %v; requests %d, hedged %d", p50, p99, hp99, plainSent.Load(), hedgedSent.Load())
		assert.GreaterOrEqual(t, float64(p99)/float64(hp99), 3.0, "p99 falls by 3x or more")
		assert.LessOrEqual(t, float64(hedgedSent.Load()), 1.10*float64(plainSent.Load()), "for at most 10%% more requests")
	})
}

func TestHedgeLosersAreCanceledAndDiscarded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var started, canceled atomic.Int64
		var discarded sync.Map
		op := func(ctx context.Context) (*int, error) {
			n := int(started.Add(1))
			d := time.Hour // the first attempt hangs
			if n > 1 {
				d = 5 * time.Millisecond
			}
			select {
			case <-time.After(d):
				return &n, nil
			case <-ctx.Done():
				canceled.Add(1)
				return &n, ctx.Err()
			}
		}
		p := pipeline.New(pipeline.WithHedging(hedge.New(hedge.Delay(10*time.Millisecond), hedge.MaxExtra(2))))
		start := time.Now()
		got, err := pipeline.Do(t.Context(), p, op, pipeline.Discard(func(r *int) { discarded.Store(*r, true) }))
		require.NoError(t, err)
		assert.Equal(t, 2, *got, "the hedge won")
		assert.Equal(t, 15*time.Millisecond, time.Since(start))
		synctest.Wait()
		assert.EqualValues(t, 2, started.Load(), "no third attempt: the second answered first")
		assert.EqualValues(t, 1, canceled.Load(), "the loser was canceled")
		_, ok := discarded.Load(1)
		assert.True(t, ok, "and its result discarded")
	})
}

func TestHedgingStops(t *testing.T) {
	slow := func(err error) func(*atomic.Int64) resilience.Operation[int] {
		return func(sent *atomic.Int64) resilience.Operation[int] {
			return func(ctx context.Context) (int, error) {
				if sent.Add(1) == 1 {
					time.Sleep(15 * time.Millisecond)
					return 0, err
				}
				<-ctx.Done()
				return 0, ctx.Err()
			}
		}
	}
	tests := []struct {
		name  string
		opts  []pipeline.Option
		call  []pipeline.CallOption
		op    func(*atomic.Int64) resilience.Operation[int]
		sent  int64
		match error
	}{
		{"a single-attempt call is not hedged", nil, []pipeline.CallOption{pipeline.SingleAttempt()}, slow(errOverloaded), 1, errOverloaded},
		{"an answer not to retry stops the hedges", nil, nil, slow(resilience.Terminal(errOverloaded)), 2, errOverloaded},
		{"a spent retry quota does not stop hedges, which have a budget of their own", []pipeline.Option{pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(1),
			retrypolicy.WithQuota(retrypolicy.NewQuota(0, 0, time.Second))))}, nil, slow(resilience.Terminal(errOverloaded)), 2, errOverloaded},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var sent atomic.Int64
				p := pipeline.New(append(tt.opts, pipeline.WithHedging(hedge.New(hedge.Delay(10*time.Millisecond))))...)
				_, err := pipeline.Do(t.Context(), p, tt.op(&sent), tt.call...)
				require.ErrorIs(t, err, tt.match)
				synctest.Wait()
				assert.Equal(t, tt.sent, sent.Load())
			})
		})
	}
}

// TestSpentHedgeBudgetSendsNoHedge: hedges are at most hedge.MaxShare of
// the calls, plus one, over 10 s.
func TestSpentHedgeBudgetSendsNoHedge(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var hedges atomic.Int64
		p := pipeline.New(pipeline.WithHedging(hedge.New(hedge.Delay(time.Millisecond), hedge.MaxShare(0.1))),
			pipeline.WithListener(resilience.ListenerFunc(func(e resilience.Event) {
				if e.Kind == resilience.EventHedged {
					hedges.Add(1)
				}
			})))
		for range 100 { // every call slow enough to be hedged
			_, _ = pipeline.Do(t.Context(), p, func(ctx context.Context) (int, error) {
				select {
				case <-time.After(5 * time.Millisecond):
					return 1, nil
				case <-ctx.Done():
					return 0, ctx.Err()
				}
			})
		}
		assert.EqualValues(t, 11, hedges.Load(), "10% of 100 calls, plus one")
	})
}

func TestOpenBreakerStopsHedging(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := breaker.New("dep", breaker.ConsecutiveFailures(1))
		var sent atomic.Int64
		p := pipeline.New(pipeline.WithBreaker(b), pipeline.WithRetry(retrypolicy.New()),
			pipeline.WithHedging(hedge.New(hedge.Delay(10*time.Millisecond))))
		go func() { // another call opens the breaker while ours waits
			time.Sleep(5 * time.Millisecond)
			_, _ = pipeline.Do(t.Context(), p, func(context.Context) (int, error) { return 0, resilience.Terminal(errOverloaded) })
		}()
		_, err := pipeline.Do(t.Context(), p, func(ctx context.Context) (int, error) {
			sent.Add(1)
			time.Sleep(20 * time.Millisecond)
			return 0, errOverloaded
		})
		require.ErrorIs(t, err, breaker.ErrOpen)
		assert.EqualValues(t, 1, sent.Load(), "no hedge once the breaker opened")
	})
}

func TestPanicInAHedgeReachesTheCaller(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var n atomic.Int64
		p := pipeline.New(pipeline.WithHedging(hedge.New(hedge.Delay(time.Millisecond))))
		op := func(ctx context.Context) (int, error) {
			if n.Add(1) == 2 {
				panic("boom")
			}
			<-ctx.Done()
			return 0, ctx.Err()
		}
		assert.PanicsWithValue(t, "boom", func() { _, _ = pipeline.Do(t.Context(), p, op) })
		done := make(chan struct{})
		go func() {
			defer close(done)
			n.Store(10)
			_, _ = pipeline.Do(t.Context(), p, func(ctx context.Context) (int, error) {
				if n.Add(1) == 11 {
					<-ctx.Done()
					return 0, ctx.Err()
				}
				runtime.Goexit()
				return 0, nil
			})
			t.Error("Goexit in a hedge must end the caller's goroutine too")
		}()
		<-done
		synctest.Wait()
	})
}

// TestWaitWhenOpenRidesOutAnOutage: callers that find the breaker open
// wait for it instead of failing, send nothing but the probes meanwhile,
// and all go on as soon as a probe succeeds.
func TestWaitWhenOpenRidesOutAnOutage(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := breaker.New("dep", breaker.ConsecutiveFailures(1), breaker.OpenTimeout(time.Second))
		p := pipeline.New(pipeline.WithTimeBudget(5*time.Second), pipeline.WithBreaker(b), pipeline.WaitWhenOpen())
		start := time.Now()
		var sent, sentWhileOpen atomic.Int64
		op := func(context.Context) (int, error) {
			sent.Add(1)
			if b.State() == resilience.StateOpen {
				sentWhileOpen.Add(1)
			}
			if time.Since(start) < 2500*time.Millisecond {
				return 0, errOverloaded
			}
			return 1, nil
		}
		_, err := pipeline.Do(t.Context(), p, op) // opens the breaker
		require.ErrorIs(t, err, errOverloaded)

		var wg sync.WaitGroup
		var done []time.Duration
		var mu sync.Mutex
		var failed atomic.Int64
		for i := range 100 {
			wg.Go(func() {
				time.Sleep(time.Duration(i) * 10 * time.Millisecond)
				if _, err := pipeline.Do(t.Context(), p, op); err != nil {
					require.ErrorIs(t, err, errOverloaded, "only a probe's own failure")
					failed.Add(1)
				}
				mu.Lock()
				done = append(done, time.Since(start))
				mu.Unlock()
			})
		}
		wg.Wait()
		assert.Zero(t, sentWhileOpen.Load(), "nothing is sent while open")
		assert.EqualValues(t, 2, failed.Load(), "the callers that were the probes at 1 s and 2 s")
		assert.EqualValues(t, 1+100, sent.Load(), "each call sent once: the probes, then every waiter")
		slices.Sort(done)
		assert.InDelta(t, 3*time.Second, done[len(done)-1], float64(time.Millisecond), "every waiter goes on as the probe closes the breaker")
	})
}

// TestWaitWhenOpenPacesTheBacklog: 500 calls wait through an outage of a
// dependency that can serve 10 at once (it fails the ones beyond, and
// takes 10 ms). When a probe closes the breaker the backlog goes through
// WaitWhenOpen's adaptive limit, queued: a few overloads while the limit
// finds the capacity, then every call that waited succeeds within its
// budget. The same backlog waiting by hand (breaker.Wait, then the call
// again) sends all 500 at once.
func TestWaitWhenOpenPacesTheBacklog(t *testing.T) {
	run := func(paced bool) (ok int, inFlightMax, overloads int64) {
		synctest.Test(t, func(t *testing.T) {
			var inFlight, peak, over atomic.Int64
			var down atomic.Bool
			down.Store(true)
			op := func(ctx context.Context) (int, error) {
				n := inFlight.Add(1)
				defer inFlight.Add(-1)
				for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
				}
				time.Sleep(10 * time.Millisecond)
				if down.Load() {
					return 0, errOverloaded
				}
				if n > 10 {
					over.Add(1)
					return 0, errOverloaded
				}
				return 1, nil
			}
			b := breaker.New("dep", breaker.ConsecutiveFailures(5), breaker.OpenTimeout(200*time.Millisecond))
			opts := []pipeline.Option{pipeline.WithTimeBudget(3 * time.Second), pipeline.WithBreaker(b),
				pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(3)))}
			if paced {
				opts = append(opts, pipeline.WaitWhenOpen())
			}
			p := pipeline.New(opts...)
			do := func(ctx context.Context) error {
				for {
					_, err := pipeline.Do(ctx, p, op)
					if paced || !breaker.IsRejection(err) {
						return err
					}
					if b.Wait(ctx, err) != nil { // waiting by hand: unpaced
						return err
					}
				}
			}
			time.AfterFunc(time.Second, func() { down.Store(false) })
			var wg sync.WaitGroup
			var succeeded atomic.Int64
			for i := range 500 {
				wg.Go(func() {
					time.Sleep(time.Duration(i) * time.Millisecond) // from 0 to 500 ms, in the outage
					if do(t.Context()) == nil {
						succeeded.Add(1)
					}
				})
			}
			wg.Wait()
			ok, inFlightMax, overloads = int(succeeded.Load()), peak.Load(), over.Load()
		})
		return ok, inFlightMax, overloads
	}
	ok, peak, over := run(true)
	t.Logf("paced: %d calls ok, at most %d in flight, %d overloads", ok, peak, over)
	assert.GreaterOrEqual(t, ok, 460, "every call succeeds but those that opened the breaker, its probes in the outage, and a few overloaded ones (467 to 487 in 160 runs)")
	assert.LessOrEqual(t, peak, int64(50), "the backlog goes at the pace of the dependency (20 to 35 in 80 runs)")
	assert.Less(t, over, int64(250), "some overloads while the limit finds the capacity (up to 160 in 80 runs)")

	_, peak, over = run(false)
	t.Logf("unpaced (breaker.Wait by hand): at most %d in flight, %d overloads", peak, over)
	assert.Greater(t, peak, int64(400), "unpaced, the backlog goes all at once")
}

func TestWaitWhenOpenKeepsToTheBudget(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := breaker.New("dep", breaker.ConsecutiveFailures(1), breaker.OpenTimeout(time.Second))
		fail := func(context.Context) (int, error) { return 0, errOverloaded }
		_, _ = pipeline.Do(t.Context(), pipeline.New(pipeline.WithBreaker(b)), fail)

		short := pipeline.New(pipeline.WithTimeBudget(500*time.Millisecond), pipeline.WithBreaker(b), pipeline.WaitWhenOpen())
		start := time.Now()
		_, err := pipeline.Do(t.Context(), short, fail)
		require.ErrorIs(t, err, breaker.ErrOpen)
		assert.Zero(t, time.Since(start), "no probe within the budget: it fails at once")

		long := pipeline.New(pipeline.WithTimeBudget(1500*time.Millisecond), pipeline.WithBreaker(b), pipeline.WaitWhenOpen())
		start = time.Now()
		_, err = pipeline.Do(t.Context(), long, fail) // it is the probe, at 1 s, which fails
		require.ErrorIs(t, err, errOverloaded)
		assert.InDelta(t, time.Second, time.Since(start), float64(time.Millisecond))

		ctx, cancel := context.WithCancel(t.Context())
		time.AfterFunc(100*time.Millisecond, cancel)
		_, err = pipeline.Do(ctx, pipeline.New(pipeline.WithBreaker(b), pipeline.WaitWhenOpen()), fail)
		require.ErrorIs(t, err, context.Canceled, "a caller that gives up mid-wait")
		require.ErrorIs(t, err, breaker.ErrOpen)
	})
}

// TestThrottleShedsLoadAndLetsGo: while the dependency refuses
// everything, the throttle sends it a trickle; once it is back, the
// throttle lets everything through again within a second.
func TestThrottleShedsLoadAndLetsGo(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		th := throttle.New(throttle.Window(500 * time.Millisecond))
		p := pipeline.New(pipeline.WithThrottle(th), pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(3))))
		var down atomic.Bool
		down.Store(true)
		var sent atomic.Int64
		op := func(context.Context) (int, error) {
			sent.Add(1)
			if down.Load() {
				return 0, errOverloaded
			}
			return 1, nil
		}
		// 1000 calls a second, from 10 goroutines, for 3 s down then 9 s up.
		var okBySecond [12]atomic.Int64
		var throttled atomic.Int64
		start := time.Now()
		time.AfterFunc(3*time.Second, func() { down.Store(false) })
		var wg sync.WaitGroup
		for range 10 {
			wg.Go(func() {
				for time.Since(start) < 12*time.Second {
					_, err := pipeline.Do(t.Context(), p, op)
					if err == nil {
						okBySecond[time.Since(start)/time.Second].Add(1)
					} else if errors.Is(err, throttle.ErrThrottled) {
						assert.Equal(t, resilience.ClassRejected, resilience.Classify(err))
						throttled.Add(1)
					}
					time.Sleep(10 * time.Millisecond)
				}
			})
		}
		time.Sleep(2 * time.Second)
		sentSecond := sent.Load()
		time.Sleep(time.Second)
		sentSecond = sent.Load() - sentSecond
		wg.Wait()
		assert.Less(t, sentSecond, int64(100), "down: under a tenth of the 1000 calls of a second reach it")
		assert.Positive(t, throttled.Load())
		back := -1
		for i := range okBySecond {
			t.Logf("second %d: %d ok", i, okBySecond[i].Load())
			if back < 0 && okBySecond[i].Load() > 990 {
				back = i
			}
		}
		// Refusals count at the share let through: the accepts soon
		// outnumber them (counted in full, full traffic took 2 to 5 s).
		assert.Greater(t, okBySecond[3].Load(), int64(800), "most calls of the first second back")
		assert.True(t, back >= 3 && back <= 4, "full traffic again %d s after the dependency is back", back-3)
		assert.Greater(t, okBySecond[11].Load(), int64(990), "and it stays")
	})
}

func TestLimitCapsAttemptsInFlight(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := limit.NewFixed(5, limit.MaxWaiting(10))
		p := pipeline.New(pipeline.WithTimeBudget(time.Second), pipeline.WithLimit(l))
		var inFlight, most atomic.Int64
		op := func(context.Context) (int, error) {
			n := inFlight.Add(1)
			defer inFlight.Add(-1)
			for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
			}
			time.Sleep(300 * time.Millisecond)
			return 1, nil
		}
		var ok, limited atomic.Int64
		var wg sync.WaitGroup
		for range 30 {
			wg.Go(func() {
				_, err := pipeline.Do(t.Context(), p, op)
				switch {
				case err == nil:
					ok.Add(1)
				case errors.Is(err, limit.ErrLimited):
					limited.Add(1)
				default:
					t.Error(err)
				}
			})
		}
		wg.Wait()
		assert.EqualValues(t, 5, most.Load())
		// 5 run at once, 10 wait: of those, 5 run at 300 ms and 5 at 600 ms; the
		// rest are refused at once.
		assert.EqualValues(t, 15, ok.Load())
		assert.EqualValues(t, 15, limited.Load())
		assert.Zero(t, l.InFlight(), "every slot is back")
	})
}

func TestLimitSlotComesBackAfterAPanic(t *testing.T) {
	l := limit.NewFixed(1)
	p := pipeline.New(pipeline.WithLimit(l))
	assert.Panics(t, func() {
		_, _ = pipeline.Do(t.Context(), p, func(context.Context) (int, error) { panic("boom") })
	})
	assert.Zero(t, l.InFlight())
	_, err := pipeline.Do(t.Context(), p, func(context.Context) (int, error) { return 1, nil })
	assert.NoError(t, err)
}

func TestThrottleAndLimitCostNoAllocation(t *testing.T) {
	p := pipeline.New(pipeline.WithBreaker(breaker.New("dep")), pipeline.WithRetry(retrypolicy.New()),
		pipeline.WithThrottle(throttle.New()), pipeline.WithLimit(limit.NewAIMD()))
	op := func(context.Context) (int, error) { return 1, nil }
	assert.Zero(t, testing.AllocsPerRun(1000, func() { _, _ = pipeline.Do(context.Background(), p, op) }))
}

// TestWaitWhenOpenLeavesAHealthyPipelineAlone: with the breaker closed and
// nothing waiting, WaitWhenOpen's pacing is off: 1500 calls at once are
// all in flight at once and take the dependency's time, no more, however
// many fail.
func TestWaitWhenOpenLeavesAHealthyPipelineAlone(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var inFlight, peak atomic.Int64
		var n atomic.Int64
		op := func(ctx context.Context) (int, error) {
			c := inFlight.Add(1)
			defer inFlight.Add(-1)
			for p := peak.Load(); c > p && !peak.CompareAndSwap(p, c); p = peak.Load() {
			}
			time.Sleep(100 * time.Millisecond)
			if n.Add(1)%50 == 0 {
				return 0, errOverloaded // 2% fail
			}
			return 1, nil
		}
		b := breaker.New("dep", breaker.ConsecutiveFailures(0))
		p := pipeline.New(pipeline.WithBreaker(b), pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(1))), pipeline.WaitWhenOpen())
		var wg sync.WaitGroup
		start := time.Now()
		for range 1500 {
			wg.Go(func() { _, _ = pipeline.Do(t.Context(), p, op) })
		}
		wg.Wait()
		assert.EqualValues(t, 1500, peak.Load(), "no cap")
		assert.Equal(t, 100*time.Millisecond, time.Since(start), "no queue")
	})
}

// TestHedgeKeepsTheLongestRetryAfter: when a hedged group fails, the
// retry waits for the longest retry-after hint among its answers, not the
// last answer's.
func TestHedgeKeepsTheLongestRetryAfter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var n atomic.Int64
		var third time.Duration
		start := time.Now()
		op := func(ctx context.Context) (int, error) {
			switch n.Add(1) {
			case 1:
				time.Sleep(20 * time.Millisecond)
				return 0, resilience.RetryAfter(errOverloaded, 2*time.Second)
			case 2: // the hedge, sent at 10 ms
				time.Sleep(30 * time.Millisecond)
				return 0, errOverloaded
			}
			third = time.Since(start)
			return 1, nil
		}
		p := pipeline.New(pipeline.WithRetry(retrypolicy.New(retrypolicy.BaseDelay(time.Millisecond), retrypolicy.MaxAttempts(3))),
			pipeline.WithHedging(hedge.New(hedge.Delay(10*time.Millisecond), hedge.MaxExtra(1))))
		_, err := pipeline.Do(t.Context(), p, op)
		require.NoError(t, err)
		assert.GreaterOrEqual(t, third, 2*time.Second+40*time.Millisecond, "the 2 s hint, counted from the group's end")

		// An answer not to retry, after one with a hint, still stops the call.
		n.Store(0)
		stop := func(ctx context.Context) (int, error) {
			if n.Add(1) == 1 {
				time.Sleep(20 * time.Millisecond)
				return 0, resilience.RetryAfter(errOverloaded, 2*time.Second)
			}
			time.Sleep(30 * time.Millisecond)
			return 0, resilience.Permanent(errOverloaded)
		}
		_, err = pipeline.Do(t.Context(), p, stop)
		require.Error(t, err)
		assert.EqualValues(t, 2, n.Load(), "no retry after the hedge's permanent answer")
	})
}

// TestHedgeDelayRunsFromTheSend: an attempt queued for a slot of the
// concurrency limit is not hedged for its time in the queue.
func TestHedgeDelayRunsFromTheSend(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var hedges atomic.Int64
		count := resilience.ListenerFunc(func(e resilience.Event) {
			if e.Kind == resilience.EventHedged {
				hedges.Add(1)
			}
		})
		p := pipeline.New(pipeline.WithListener(count), pipeline.WithRetry(retrypolicy.New()),
			pipeline.WithLimit(limit.NewFixed(1, limit.MaxWaiting(100))),
			pipeline.WithHedging(hedge.New(hedge.Delay(10*time.Millisecond))))
		op := func(ctx context.Context) (int, error) {
			time.Sleep(5 * time.Millisecond)
			return 1, nil
		}
		var wg sync.WaitGroup
		for range 20 {
			wg.Go(func() {
				_, err := pipeline.Do(t.Context(), p, op)
				assert.NoError(t, err)
			})
		}
		wg.Wait()
		assert.Zero(t, hedges.Load(), "each attempt answers 5 ms after it is sent")
	})
}

// TestWaitWhenOpenRecoveryCost measures what the pacing of WaitWhenOpen
// costs where no ramp calls for it: 200 callers in a closed loop, a
// backend answering in 50 ms that fails fast from 1 s to 2 s and then
// comes back at full capacity at once. It prints when each pipeline's
// goodput is back to 95% of what it was before, after the backend is.
func TestWaitWhenOpenRecoveryCost(t *testing.T) {
	back := func(wait bool) time.Duration {
		var at time.Duration
		synctest.Test(t, func(t *testing.T) {
			opts := []pipeline.Option{pipeline.WithBreaker(breaker.New("dep", breaker.OpenTimeout(100*time.Millisecond))),
				pipeline.WithTimeBudget(2 * time.Second)}
			if wait {
				opts = append(opts, pipeline.WaitWhenOpen())
			}
			p := pipeline.New(opts...)
			start := time.Now()
			var buckets [40]atomic.Int64
			ctx, cancel := context.WithTimeout(t.Context(), 4*time.Second)
			defer cancel()
			op := func(ctx context.Context) (int, error) {
				if el := time.Since(start); el >= time.Second && el < 2*time.Second {
					time.Sleep(time.Millisecond)
					return 0, errOverloaded
				}
				time.Sleep(50 * time.Millisecond)
				return 1, nil
			}
			var wg sync.WaitGroup
			for range 200 {
				wg.Go(func() {
					for ctx.Err() == nil {
						if _, err := pipeline.Do(ctx, p, op); err != nil {
							time.Sleep(time.Millisecond)
						} else if i := int(time.Since(start) / (100 * time.Millisecond)); i < len(buckets) {
							buckets[i].Add(1)
						}
					}
				})
			}
			wg.Wait()
			before := buckets[5].Load()
			for i := 20; i < len(buckets); i++ {
				if float64(buckets[i].Load()) >= 0.95*float64(before) {
					at = time.Duration(i-19) * 100 * time.Millisecond // the end of bucket i, from 2 s
					return
				}
			}
			at = -1
		})
		return at
	}
	plain, waiting := back(false), back(true)
	t.Logf("goodput back to 95%% after the backend: %v without WaitWhenOpen, %v with it", plain, waiting)
	assert.Positive(t, plain)
	assert.LessOrEqual(t, plain, 200*time.Millisecond)
	assert.Positive(t, waiting, "the backlog is served")
	assert.LessOrEqual(t, waiting, time.Second, "in slow start, not for ever")
}

// TestWaitWhenOpenNeverSendsWhileOpen: callers wait through an outage with
// two open spells, their backlog queued in WaitWhenOpen's pacer as the
// breaker opens again; an attempt that gets its slot once the breaker has
// reopened is not sent, and waits again. "While open" is after the
// opening, in virtual time: an attempt admitted at the very instant an
// earlier one's failure opens the breaker was sent before it opened.
func TestWaitWhenOpenNeverSendsWhileOpen(t *testing.T) {
	for run := range 20 {
		synctest.Test(t, func(t *testing.T) {
			var openedAt atomic.Int64 // virtual ns since start, of the last opening
			start := time.Now()
			b := breaker.New("dep", breaker.ConsecutiveFailures(3), breaker.OpenTimeout(150*time.Millisecond),
				breaker.WithListener(resilience.ListenerFunc(func(e resilience.Event) {
					if e.Kind == resilience.EventStateChange && e.To == resilience.StateOpen {
						openedAt.Store(int64(time.Since(start)))
					}
				})))
			p := pipeline.New(pipeline.WithTimeBudget(3*time.Second), pipeline.WithBreaker(b), pipeline.WaitWhenOpen(),
				pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(2))))
			down := func(el time.Duration) bool { // two spells: 200-600 ms and 900-1300 ms
				return el >= 200*time.Millisecond && el < 600*time.Millisecond || el >= 900*time.Millisecond && el < 1300*time.Millisecond
			}
			var sent, whileOpen, ok atomic.Int64
			op := func(ctx context.Context) (int, error) {
				sent.Add(1)
				el := time.Since(start)
				if b.State() == resilience.StateOpen && int64(el) > openedAt.Load() {
					whileOpen.Add(1)
				}
				time.Sleep(20*time.Millisecond + rand.N(10*time.Millisecond))
				if down(time.Since(start)) {
					return 0, errOverloaded
				}
				return 1, nil
			}
			var wg sync.WaitGroup
			for i := range 1000 {
				wg.Go(func() {
					time.Sleep(time.Duration(i) * 1500 * time.Microsecond) // 0 to 1.5 s
					if _, err := pipeline.Do(t.Context(), p, op); err == nil {
						ok.Add(1)
					}
				})
			}
			wg.Wait()
			assert.Zero(t, whileOpen.Load(), "run %d: of %d attempts sent, none while open", run, sent.Load())
			assert.Greater(t, ok.Load(), int64(800), "run %d: the waiters are served once it is back", run)
		})
	}
}

// TestWaitWhenOpenDoesNotQueueCallsThatNeverWaited: while a call that
// waited for the breaker is still out, calls that never waited keep their
// concurrency: 3000 healthy 100 ms calls at once take 100 ms, not a turn
// each behind the pacer.
func TestWaitWhenOpenDoesNotQueueCallsThatNeverWaited(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := breaker.New("dep", breaker.ConsecutiveFailures(1), breaker.OpenTimeout(100*time.Millisecond))
		p := pipeline.New(pipeline.WithBreaker(b), pipeline.WaitWhenOpen())
		_, err := pipeline.Do(t.Context(), p, func(context.Context) (int, error) { return 0, errOverloaded })
		require.ErrorIs(t, err, errOverloaded) // opens the breaker
		var n atomic.Int64
		probeThenSlow := func(ctx context.Context) (int, error) {
			if n.Add(1) > 1 {
				time.Sleep(time.Second)
			}
			return 1, nil
		}
		waited := make(chan error, 2)
		for range 2 { // both wait; one probes at 100 ms, the other is then out until 1.1 s
			go func() { _, err := pipeline.Do(t.Context(), p, probeThenSlow); waited <- err }()
		}
		time.Sleep(200 * time.Millisecond)
		require.Equal(t, resilience.StateClosed, b.State(), "the probe closed it")

		var inFlight, peak atomic.Int64
		healthy := func(ctx context.Context) (int, error) {
			n := inFlight.Add(1)
			defer inFlight.Add(-1)
			for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
			}
			time.Sleep(100 * time.Millisecond)
			return 1, nil
		}
		start := time.Now()
		var wg sync.WaitGroup
		for range 3000 {
			wg.Go(func() {
				_, err := pipeline.Do(t.Context(), p, healthy)
				assert.NoError(t, err)
			})
		}
		wg.Wait()
		assert.Equal(t, 100*time.Millisecond, time.Since(start), "no queue behind the call that waited")
		assert.EqualValues(t, 3000, peak.Load())
		require.NoError(t, <-waited)
		require.NoError(t, <-waited)
	})
}

// TestHedgingStartsNothingUntilAHedgeIsDue: a hedged call whose first
// attempt answers before the hedging delay runs on the caller's goroutine
// alone: no goroutine is started for it.
func TestHedgingStartsNothingUntilAHedgeIsDue(t *testing.T) {
	p := pipeline.New(pipeline.WithBreaker(breaker.New("dep")), pipeline.WithRetry(retrypolicy.New()),
		pipeline.WithHedging(hedge.New(hedge.Delay(time.Hour))))
	caller := goroutineID()
	var attempt string
	var others []string
	_, err := pipeline.Do(t.Context(), p, func(context.Context) (int, error) {
		attempt = goroutineID()
		buf := make([]byte, 1<<20)
		for g := range strings.SplitSeq(string(buf[:runtime.Stack(buf, true)]), "\n\n") {
			if strings.Contains(g, "resiliencekit/pipeline.") && !strings.HasPrefix(g, attempt) {
				others = append(others, g)
			}
		}
		return 1, nil
	})
	require.NoError(t, err)
	assert.Equal(t, caller, attempt, "the attempt runs on the caller's goroutine")
	assert.Empty(t, others, "and no goroutine of the pipeline's runs beside it")
	allocs := testing.AllocsPerRun(1000, func() {
		_, _ = pipeline.Do(context.Background(), p, func(context.Context) (int, error) { return 1, nil })
	})
	assert.LessOrEqual(t, allocs, 1.0, "the race with the call's attempt numbering; its delay waits in the pipeline's one timer")
}

// TestLateHedgeLeavesTheWinnersContextAlone: the first attempt of a
// streamed call wins; a hedge that answers after it, successfully, does
// not cancel the context the winner's result still reads from.
func TestLateHedgeLeavesTheWinnersContextAlone(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var n atomic.Int64
		op := func(ctx context.Context) (context.Context, error) {
			if n.Add(1) == 1 {
				time.Sleep(15 * time.Millisecond) // wins at 15 ms
				return ctx, nil
			}
			time.Sleep(10 * time.Millisecond) // the hedge, sent at 10 ms, answers at 20 ms
			return ctx, nil
		}
		p := pipeline.New(pipeline.WithHedging(hedge.New(hedge.Delay(10 * time.Millisecond))))
		got, release, err := pipeline.DoStream(t.Context(), p, op)
		require.NoError(t, err)
		time.Sleep(20 * time.Millisecond)
		synctest.Wait()
		assert.EqualValues(t, 2, n.Load(), "the hedge was sent and answered")
		assert.NoError(t, got.Err(), "the winner's context lives until release")
		release()
		assert.ErrorIs(t, got.Err(), context.Canceled)
	})
}

// TestHedgeWinningFirstIsTakenAsTheFirstAttemptReturns: a hedge that wins
// while the first attempt still runs cancels it; the call returns the
// hedge's answer as soon as the first attempt honours that.
func TestHedgeWinningFirstIsTakenAsTheFirstAttemptReturns(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var n atomic.Int64
		op := func(ctx context.Context) (int, error) {
			i := int(n.Add(1))
			if i == 1 {
				<-ctx.Done()
				return 0, ctx.Err()
			}
			time.Sleep(5 * time.Millisecond)
			return i, nil
		}
		var mu sync.Mutex
		var events []resilience.EventKind
		p := pipeline.New(pipeline.WithRetry(retrypolicy.New()), pipeline.WithListener(resilience.ListenerFunc(func(e resilience.Event) {
			mu.Lock()
			defer mu.Unlock()
			events = append(events, e.Kind)
		})), pipeline.WithHedging(hedge.New(hedge.Delay(10*time.Millisecond))))
		start := time.Now()
		got, err := pipeline.Do(t.Context(), p, op)
		require.NoError(t, err)
		assert.Equal(t, 2, got)
		assert.Equal(t, 15*time.Millisecond, time.Since(start))
		assert.NotContains(t, events, resilience.EventRetry, "the canceled first attempt is a loser, not a failure to retry")
	})
}

// goroutineID returns the first line of the calling goroutine's stack,
// "goroutine N [running]:", which names it.
func goroutineID() string {
	buf := make([]byte, 64)
	line, _, _ := strings.Cut(string(buf[:runtime.Stack(buf, false)]), " [")
	return line
}

// TestRefusedHedgeLeavesTheAnswer: a hedge refused on our side (the
// concurrency limit is full with its twin) is no answer: the first
// attempt's failure is, and is retried.
func TestRefusedHedgeLeavesTheAnswer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var n atomic.Int64
		op := func(ctx context.Context) (int, error) {
			if n.Add(1) == 1 {
				time.Sleep(15 * time.Millisecond)
				return 0, errOverloaded
			}
			return 1, nil
		}
		p := pipeline.New(pipeline.WithRetry(retrypolicy.New(retrypolicy.BaseDelay(time.Millisecond))),
			pipeline.WithLimit(limit.NewFixed(1)), pipeline.WithHedging(hedge.New(hedge.Delay(10*time.Millisecond))))
		got, err := pipeline.Do(t.Context(), p, op)
		require.NoError(t, err, "the first attempt's failure was retried")
		assert.Equal(t, 1, got)
		assert.EqualValues(t, 2, n.Load(), "the hedge was refused, the retry sent")
	})
}

// TestProbeOutOfTimeAfterAWaitIsNotHeldAgainstTheDependency: a call that
// waited for the breaker and is made its probe with too little of its
// budget left to get an answer fails for want of time, not because of the
// dependency: the breaker does not reopen on it, and the next waiter
// probes at once.
func TestProbeOutOfTimeAfterAWaitIsNotHeldAgainstTheDependency(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := breaker.New("dep", breaker.ConsecutiveFailures(1), breaker.OpenTimeout(100*time.Millisecond))
		_, _ = pipeline.Do(t.Context(), pipeline.New(pipeline.WithBreaker(b)), func(context.Context) (int, error) { return 0, errOverloaded })
		short := pipeline.New(pipeline.WithBreaker(b), pipeline.WithTimeBudget(150*time.Millisecond), pipeline.WaitWhenOpen())
		long := pipeline.New(pipeline.WithBreaker(b), pipeline.WithTimeBudget(time.Second), pipeline.WaitWhenOpen())
		start := time.Now()
		shortErr := make(chan error, 1)
		go func() { // the only waiter at 100 ms: the probe, with 50 ms left, for a 60 ms answer
			_, err := pipeline.Do(t.Context(), short, func(ctx context.Context) (int, error) {
				select {
				case <-time.After(60 * time.Millisecond):
					return 1, nil
				case <-ctx.Done():
					return 0, ctx.Err()
				}
			})
			shortErr <- err
		}()
		time.Sleep(120 * time.Millisecond) // waits for the probe out
		_, err := pipeline.Do(t.Context(), long, func(context.Context) (int, error) {
			time.Sleep(10 * time.Millisecond)
			return 1, nil
		})
		require.NoError(t, err)
		assert.Equal(t, 160*time.Millisecond, time.Since(start), "the next waiter probed as the first ran out of time, at 150 ms")
		assert.Equal(t, resilience.StateClosed, b.State())
		require.ErrorIs(t, <-shortErr, context.DeadlineExceeded, "the probe out of time says so")
	})
}

// TestWaitWhenOpenSaysACallWaits: a call that finds the breaker open and
// waits is reported as EventWaitOpen, with the rejection it waits out.
func TestWaitWhenOpenSaysACallWaits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := breaker.New("dep", breaker.ConsecutiveFailures(1), breaker.OpenTimeout(100*time.Millisecond))
		_, _ = pipeline.Do(t.Context(), pipeline.New(pipeline.WithBreaker(b)), func(context.Context) (int, error) { return 0, errOverloaded })
		var waits atomic.Int64
		var why error
		p := pipeline.New(pipeline.WithBreaker(b), pipeline.WaitWhenOpen(), pipeline.WithListener(resilience.ListenerFunc(func(e resilience.Event) {
			if e.Kind == resilience.EventWaitOpen {
				waits.Add(1)
				why = e.Err
			}
		})))
		_, err := pipeline.Do(t.Context(), p, func(context.Context) (int, error) { return 1, nil })
		require.NoError(t, err)
		assert.EqualValues(t, 1, waits.Load())
		assert.ErrorIs(t, why, breaker.ErrOpen)
	})
}

// TestHedgeRaceDisposesOfTheAnswerItReplaces: a failure to retry that a
// later success replaces is given to Discard, as every result not
// returned is.
func TestHedgeRaceDisposesOfTheAnswerItReplaces(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var n atomic.Int64
		op := func(ctx context.Context) (int, error) {
			if n.Add(1) == 1 {
				time.Sleep(15 * time.Millisecond)
				return 1, errOverloaded // a failure to retry, with a result to dispose of
			}
			time.Sleep(10 * time.Millisecond) // the hedge, sent at 10 ms, answers at 20 ms
			return 2, nil
		}
		var discarded []int
		var mu sync.Mutex
		p := pipeline.New(pipeline.WithRetry(retrypolicy.New()), pipeline.WithHedging(hedge.New(hedge.Delay(10*time.Millisecond))))
		got, err := pipeline.Do(t.Context(), p, op, pipeline.Discard(func(r int) { mu.Lock(); discarded = append(discarded, r); mu.Unlock() }))
		require.NoError(t, err)
		assert.Equal(t, 2, got)
		synctest.Wait()
		mu.Lock()
		defer mu.Unlock()
		assert.Equal(t, []int{1}, discarded, "the first attempt's result, replaced by the hedge's")
	})
}
