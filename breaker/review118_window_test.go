package breaker_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/resilience"
)

var errReview118Down = errors.New("dependency down")

// A dependency that fails every call, each after latency, called back to
// back by `callers` goroutines for `span`: the breaker must open.
func review118Hammer(t *testing.T, b *breaker.Breaker, latency time.Duration, callers int, span time.Duration) {
	t.Helper()
	var wg sync.WaitGroup
	end := time.Now().Add(span)
	for range callers {
		wg.Go(func() {
			for time.Now().Before(end) {
				err := b.Execute(context.Background(), func(ctx context.Context) error {
					time.Sleep(latency)
					return errReview118Down
				})
				if breaker.IsRejection(err) {
					time.Sleep(latency)
				}
			}
		})
	}
	wg.Wait()
}

// Window(1s, 1) and a dependency failing every call after 600 ms, two
// callers: every other pair of failures straddled the window's renewal
// and was dropped, so the run of failures never passed 2. (With one
// caller, three failures take 1.8 s, more than the window holds: a run is
// of the failures in the window.)
func TestReview118OneBucketWindowSlowFailuresOpen(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var opened bool
		var mu sync.Mutex
		b := breaker.New("w1", breaker.ConsecutiveFailures(3), breaker.Window(time.Second, 1),
			breaker.WithListener(resilience.ListenerFunc(func(e resilience.Event) {
				if e.Kind == resilience.EventStateChange && e.To == resilience.StateOpen {
					mu.Lock()
					opened = true
					mu.Unlock()
				}
			})))
		review118Hammer(t, b, 600*time.Millisecond, 2, 30*time.Second)
		mu.Lock()
		defer mu.Unlock()
		if !opened {
			t.Fatalf("a dependency failing every call (600ms each) for 30s (two callers) never opened a breaker with ConsecutiveFailures(3), Window(1s,1); counts %+v", b.Counts())
		}
	})
}

// Same with a failure rate.
func TestReview118OneBucketWindowSlowFailuresOpenRate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := breaker.New("w1r", breaker.FailureRate(0.5, 4), breaker.Window(time.Second, 1))
		opened := false
		b.Listen(resilience.ListenerFunc(func(e resilience.Event) {
			if e.Kind == resilience.EventStateChange && e.To == resilience.StateOpen {
				opened = true
			}
		}))
		review118Hammer(t, b, 1200*time.Millisecond, 8, 30*time.Second)
		if !opened {
			t.Fatalf("8 callers, every call failing after 1.2s, for 30s never opened FailureRate(0.5,4), Window(1s,1)")
		}
	})
}

// Default window (60 s, 6 buckets), a dependency that hangs 70 s on every
// call then fails (callers without a deadline): "a dependency that hangs
// opens it through the calls that had more".
func TestReview118HangLongerThanWindowOpens(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := breaker.New("w60")
		opened := false
		b.Listen(resilience.ListenerFunc(func(e resilience.Event) {
			if e.Kind == resilience.EventStateChange && e.To == resilience.StateOpen {
				opened = true
			}
		}))
		review118Hammer(t, b, 70*time.Second, 20, 10*time.Minute)
		if !opened {
			t.Fatalf("20 callers, every call failing after 70s, for 10 min never opened the default breaker; counts %+v", b.Counts())
		}
	})
}

// Window(10s, 10), callers with a 15 s deadline, a dependency that hangs:
// every call ends with its deadline, the dependency's doing (15 s is far
// over any answer it ever gave: it gave none), yet none is counted.
func TestReview118HangPastWindowWithDeadlineOpens(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := breaker.New("w10", breaker.Window(10*time.Second, 10))
		opened := false
		b.Listen(resilience.ListenerFunc(func(e resilience.Event) {
			if e.Kind == resilience.EventStateChange && e.To == resilience.StateOpen {
				opened = true
			}
		}))
		var wg sync.WaitGroup
		end := time.Now().Add(5 * time.Minute)
		for range 10 {
			wg.Go(func() {
				for time.Now().Before(end) {
					ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
					err := b.Execute(ctx, func(ctx context.Context) error {
						<-ctx.Done()
						return ctx.Err()
					})
					cancel()
					if breaker.IsRejection(err) {
						time.Sleep(time.Second)
					}
				}
			})
		}
		wg.Wait()
		if !opened {
			t.Fatalf("10 callers with 15s deadlines against a hung dependency for 5 min never opened Window(10s,10); counts %+v", b.Counts())
		}
	})
}
