package breaker_test

import (
	"context"
	"errors"
	"os"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/resilience"
)

// r33fast answers at once.
func r33fast(context.Context) error { return nil }

// The scenario (five requests with a 5 ms budget to a service
// whose dependency answers in 30 ms), except that the dependency answered
// one fast call (a cache hit, a cheap endpoint, a readiness check) in the
// minute before. A cold breaker leaves the five out (100 ms cold
// answer); the fast answer lowers the bar to ~0, so the five count, and
// the breaker then rejects the fast call that a plain client completes.
func TestReview33FastAnswerThenShortBudgetsOpen(t *testing.T) {
	for _, warm := range []bool{false, true} {
		name := "cold"
		if warm {
			name = "after-one-fast-answer"
		}
		t.Run(name, func(t *testing.T) {
			b := breaker.New("dep")
			if warm {
				require.NoError(t, b.Execute(context.Background(), r33fast))
			}
			for range 5 {
				err := within(b, 5*time.Millisecond, answerIn(30*time.Millisecond))
				require.ErrorIs(t, err, context.DeadlineExceeded)
			}
			// The service's other call, to the same healthy dependency.
			err := b.Execute(context.Background(), r33fast)
			assert.NoError(t, err, "a caller's 5 ms budget opened the breaker against a healthy dependency (counts %+v)", b.Counts())
		})
	}
}

// Same, with the service's calls interleaved as a handler makes them:
// each request reads /fast (answers at once) then /slow (30 ms) with what
// is left of a 5 ms budget. With FailureRate, which a consecutive run
// would not need, the cut /slow calls count as failures and open the
// breaker, which then fails /fast too.
func TestReview33FastThenSlowPerRequestFailureRate(t *testing.T) {
	b := breaker.New("dep", breaker.FailureRate(0.5, 10))
	for range 10 {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Millisecond)
		err := b.Execute(ctx, r33fast)
		if err != nil {
			cancel()
			assert.NoError(t, err, "the /fast call of a request was rejected against a healthy dependency (counts %+v)", b.Counts())
			return
		}
		err = b.Execute(ctx, answerIn(30*time.Millisecond))
		cancel()
		if breaker.IsRejection(err) {
			assert.NoError(t, err, "rejected (counts %+v)", b.Counts())
			return
		}
		require.ErrorIs(t, err, context.DeadlineExceeded)
	}
	assert.Equal(t, "closed", b.State().String(), "counts %+v", b.Counts())
}

// A dependency that answered in 30 ms, then nothing for a minute (a
// quiet hour, a batch job's dependency): no answer of the last minute is
// kept, and a cut call is then compared with nothing, not with the 100 ms
// a cold breaker takes. Five 5 ms budgets open it.
func TestReview33IdleMinuteThenShortBudgetsOpen(t *testing.T) {
	for _, idle := range []time.Duration{0, 61 * time.Second} {
		t.Run(idle.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				b := breaker.New("dep")
				require.NoError(t, b.Execute(context.Background(), answerIn(30*time.Millisecond)))
				time.Sleep(idle)
				for range 5 {
					err := within(b, 5*time.Millisecond, answerIn(30*time.Millisecond))
					require.ErrorIs(t, err, context.DeadlineExceeded)
				}
				err := b.Execute(context.Background(), answerIn(30*time.Millisecond))
				assert.NoError(t, err, "idle %v: a caller's 5 ms budget opened the breaker against a dependency answering in 30 ms (counts %+v)", idle, b.Counts())
			})
		})
	}
}

// A dependency that has hung since the breaker was made (a replica that
// starts during an outage), called with budgets under 100 ms: no call
// ever counts, for two minutes and beyond. (Found by the review against
// the second design; the third leaves every call under 100 ms out, and
// this test now holds it to that.) The same dependency, had it
// answered once, would open the breaker within a minute of its last
// answer ("through every call once that answer is over a minute old").
func TestReview33ColdHangUnder100msNeverOpens(t *testing.T) {
	for _, answeredOnce := range []bool{true, false} {
		name := "never-answered"
		if answeredOnce {
			name = "answered-once"
		}
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				b := breaker.New("dep")
				if answeredOnce {
					require.NoError(t, b.Execute(context.Background(), answerIn(30*time.Millisecond)))
				}
				hang := answerIn(time.Hour)
				start := time.Now()
				var opened time.Duration = -1
				for time.Since(start) < 2*time.Minute {
					err := within(b, 50*time.Millisecond, hang)
					if breaker.IsRejection(err) || b.State().String() != "closed" {
						opened = time.Since(start)
						break
					}
					time.Sleep(time.Second) // a call a second
				}
				// By design since (the package doc: "a budget under 100 ms
				// ... never opens the breaker by running out"): such calls
				// fail at their deadline, as a plain client's do.
				assert.Negative(t, opened, "budgets under 100 ms count (counts %+v)", b.Counts())
				t.Logf("%s: opened after %v (-1: never)", name, opened)
			})
		})
	}
}

// A dependency that hangs on 95% of the calls and answers the rest at
// once, called by 16 goroutines with 200 ms budgets: every hung call
// overlaps an answer to another, so none counts; a FailureRate(0.5)
// breaker stays closed however long it lasts.
func TestReview33TrickleOfAnswersHidesHang(t *testing.T) {
	for _, every := range []int64{20, 10, 4} {
		t.Run("1in"+strconv.Itoa(int(every)), func(t *testing.T) { r33trickle(t, every) })
	}
}

func r33trickle(t *testing.T, every int64) {
	b := breaker.New("dep", breaker.FailureRate(0.5, 20))
	var n atomic.Int64
	op := func(ctx context.Context) error {
		if n.Add(1)%every == 0 {
			return nil // one in every
		}
		<-ctx.Done()
		return ctx.Err()
	}
	var rejected, cut atomic.Int64
	var wg sync.WaitGroup
	stop := time.Now().Add(2 * time.Second)
	for range 16 {
		wg.Go(func() {
			for time.Now().Before(stop) {
				err := within(b, 200*time.Millisecond, op)
				switch {
				case breaker.IsRejection(err):
					rejected.Add(1)
					time.Sleep(10 * time.Millisecond)
				case errors.Is(err, context.DeadlineExceeded):
					cut.Add(1)
				}
			}
		})
	}
	wg.Wait()
	t.Logf("calls %d, hung %d, rejected %d, counts %+v", n.Load(), cut.Load(), rejected.Load(), b.Counts())
	assert.NotZero(t, rejected.Load(), "%d%% of the calls hung for 2 s and a FailureRate(0.5) breaker never opened", 100-100/every)
}

// Even a dependency that hangs on every call but one probe-like cheap
// endpoint: a call to /health every 100 ms (answered at once) keeps every
// hung call of the main endpoint out of the counts.
func TestReview33HealthEndpointHidesHang(t *testing.T) {
	// A rate: the health answers break every run of failures, so that a
	// breaker of 5 failures in a row would not open, whatever it counts.
	b := breaker.New("dep", breaker.FailureRate(0.5, 10))
	stop := time.Now().Add(2 * time.Second)
	var wg sync.WaitGroup
	wg.Go(func() {
		for time.Now().Before(stop) {
			_ = b.Execute(context.Background(), r33fast)
			time.Sleep(100 * time.Millisecond)
		}
	})
	var rejected, cut atomic.Int64
	for range 4 {
		wg.Go(func() {
			for time.Now().Before(stop) {
				err := within(b, 300*time.Millisecond, answerIn(time.Hour))
				if breaker.IsRejection(err) {
					rejected.Add(1)
					time.Sleep(10 * time.Millisecond)
				} else {
					cut.Add(1)
				}
			}
		})
	}
	wg.Wait()
	t.Logf("hung calls %d, rejected %d, counts %+v", cut.Load(), rejected.Load(), b.Counts())
	assert.NotZero(t, rejected.Load(), "the main endpoint hung for 2 s and the breaker never opened")
}

// TestReview33IdleMinuteRealClock is TestReview33IdleMinuteThenShortBudgetsOpen
// on the real clock (61 s): run with R33_REAL=1.
func TestReview33IdleMinuteRealClock(t *testing.T) {
	if os.Getenv("R33_REAL") == "" {
		t.Skip("61 s on the real clock: R33_REAL=1")
	}
	b := breaker.New("dep")
	require.NoError(t, b.Execute(context.Background(), answerIn(30*time.Millisecond)))
	time.Sleep(61 * time.Second)
	for range 5 {
		err := within(b, 5*time.Millisecond, answerIn(30*time.Millisecond))
		require.ErrorIs(t, err, context.DeadlineExceeded)
	}
	err := b.Execute(context.Background(), answerIn(30*time.Millisecond))
	assert.NoError(t, err, "after 61 s idle, a caller's 5 ms budget opened the breaker (counts %+v)", b.Counts())
}

// Many goroutines through every mode, with deadlines that end calls at
// once, a FailIf that panics on some errors, and ops that panic or call
// runtime.Goexit: run under -race; the breaker must still close and
// serve once all is well.
func TestReview33StressModesPanicsDeadlines(t *testing.T) {
	b := breaker.New("dep", breaker.FailIf(func(err error) bool {
		if err != nil && err.Error() == "boom-classifier" {
			panic("failif")
		}
		return true
	}), breaker.OpenTimeout(time.Millisecond))
	stop := time.Now().Add(1500 * time.Millisecond)
	var wg sync.WaitGroup
	wg.Go(func() {
		modes := []breaker.Mode{breaker.Normal, breaker.ForcedClosed, breaker.Disabled, breaker.Normal}
		for i := 0; time.Now().Before(stop); i++ {
			_ = b.SetMode(context.Background(), modes[i%len(modes)], "r33")
			time.Sleep(3 * time.Millisecond)
		}
		_ = b.SetMode(context.Background(), breaker.Normal, "r33")
	})
	for g := range 8 {
		wg.Go(func() {
			for i := 0; time.Now().Before(stop); i++ {
				func() {
					defer func() { _ = recover() }()
					ctx, cancel := context.WithTimeout(context.Background(), time.Duration(i%5)*time.Millisecond)
					defer cancel()
					_ = b.Execute(ctx, func(ctx context.Context) error {
						switch (i + g) % 7 {
						case 0:
							panic("op")
						case 1:
							done := make(chan struct{})
							go func() {
								defer close(done)
								_ = b.Execute(ctx, func(context.Context) error { runtime.Goexit(); return nil })
							}()
							<-done
							return nil
						case 2:
							return errors.New("boom-classifier")
						case 3:
							return answerIn(2 * time.Millisecond)(ctx)
						}
						return nil
					})
				}()
			}
		})
	}
	wg.Wait()
	require.Eventually(t, func() bool {
		return b.Execute(context.Background(), r33fast) == nil && b.State() == resilience.StateClosed
	},
		2*time.Second, 5*time.Millisecond, "counts %+v", b.Counts())
}
