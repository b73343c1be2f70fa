package breaker_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/resilience"
	"github.com/sony/gobreaker/v2"
)

var errBoom = errors.New("boom")

// pending is a call started through a breaker and held until release.
type pending struct {
	started chan struct{} // closed when op runs (admitted)
	release chan error
	result  chan error // Execute's error
}

func startRK(b *breaker.Breaker) *pending {
	p := &pending{started: make(chan struct{}), release: make(chan error, 1), result: make(chan error, 1)}
	go func() {
		p.result <- b.Execute(context.Background(), func(context.Context) error {
			close(p.started)
			return <-p.release
		})
	}()
	synctest.Wait()
	return p
}

func startGB(cb *gobreaker.CircuitBreaker[struct{}]) *pending {
	p := &pending{started: make(chan struct{}), release: make(chan error, 1), result: make(chan error, 1)}
	go func() {
		_, err := cb.Execute(func() (struct{}, error) {
			close(p.started)
			return struct{}{}, <-p.release
		})
		p.result <- err
	}()
	synctest.Wait()
	return p
}

func (p *pending) finish(err error) error {
	p.release <- err
	synctest.Wait()
	return <-p.result
}

func gbState(s gobreaker.State) resilience.State {
	switch s {
	case gobreaker.StateOpen:
		return resilience.StateOpen
	case gobreaker.StateHalfOpen:
		return resilience.StateHalfOpen
	}
	return resilience.StateClosed
}

// A success from a call admitted in a bucket that has left the window is
// dropped by gobreaker; the core counts it as of its end (review118), so
// it breaks the run of failures before it: fail, fail, success, fail is
// not 3 failures in a row (ConsecutiveFailures(3)), where gobreaker,
// which never saw the success, opens.
func TestReviewLateSuccessResetsFailureRun(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := breaker.New("x", breaker.ConsecutiveFailures(3), breaker.Window(10*time.Second, 2), breaker.OpenTimeout(time.Minute))
		gb := gobreaker.NewCircuitBreaker[struct{}](gobreaker.Settings{
			Interval: 10 * time.Second, BucketPeriod: 5 * time.Second, Timeout: time.Minute,
			ReadyToTrip: func(c gobreaker.Counts) bool { return c.ConsecutiveFailures >= 3 },
		})
		// t=0: a slow call A is admitted (bucket 0).
		a, ga := startRK(b), startGB(gb)
		// t=6s (bucket 1): two failures.
		time.Sleep(6 * time.Second)
		for range 2 {
			startRK(b).finish(errBoom)
			startGB(gb).finish(errBoom)
		}
		// t=11s (bucket 2: bucket 0 left the window): A succeeds.
		time.Sleep(5 * time.Second)
		a.finish(nil)
		ga.finish(nil)
		t.Logf("after A: rk %+v gb %+v", b.Counts(), gb.Counts())
		// A third failure in a row within the window.
		startRK(b).finish(errBoom)
		startGB(gb).finish(errBoom)
		t.Logf("after 3rd failure: rk %v %+v, gb %v %+v", b.State(), b.Counts(), gbState(gb.State()), gb.Counts())
		if b.State() != resilience.StateClosed || b.Counts().ConsecutiveFailures != 1 {
			t.Errorf("resiliencekit %v %+v: a success ended between the failures", b.State(), b.Counts())
		}
		if gbState(gb.State()) != resilience.StateOpen {
			t.Errorf("gobreaker %v: it drops the late success", gbState(gb.State()))
		}
	})
}

// With one bucket (gobreaker's Interval), a failure of a call admitted in
// an interval that has passed is dropped by gobreaker (new generation);
// the core counts it in the window as it is when it ends (review118):
// ConsecutiveFailures(1) opens the breaker on a call of the previous
// interval, where gobreaker stays closed.
func TestReviewOneBucketFailureFromPreviousIntervalCounts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := breaker.New("x", breaker.ConsecutiveFailures(1), breaker.Window(10*time.Second, 1), breaker.OpenTimeout(time.Minute))
		gb := gobreaker.NewCircuitBreaker[struct{}](gobreaker.Settings{
			Interval: 10 * time.Second, Timeout: time.Minute,
			ReadyToTrip: func(c gobreaker.Counts) bool { return c.ConsecutiveFailures >= 1 },
		})
		a, ga := startRK(b), startGB(gb)
		time.Sleep(11 * time.Second)
		a.finish(errBoom)
		ga.finish(errBoom)
		t.Logf("rk %v %+v, gb %v %+v", b.State(), b.Counts(), gbState(gb.State()), gb.Counts())
		if b.State() != resilience.StateOpen {
			t.Errorf("resiliencekit %v: the late failure counts", b.State())
		}
		if gbState(gb.State()) != resilience.StateClosed {
			t.Errorf("gobreaker %v: it drops the late failure", gbState(gb.State()))
		}
	})
}

// A failure whose bucket has left the window does not count, in either;
// but gobreaker still asks ReadyToTrip of the window's counts on it (a
// failure in the closed state), and opens when they meet FailureRate. The
// core returns first: the window holds 2 ended calls, half of them
// failures (FailureRate(0.5, 2): "opens the breaker when at least
// minRequests calls have ended in the window and the share of failures
// among them reaches ratio"), a call fails, and the breaker stays closed.
func TestReviewOutOfWindowFailureDoesNotAskReadyToTrip(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := breaker.New("x", breaker.ConsecutiveFailures(0), breaker.FailureRate(0.5, 2), breaker.Window(10*time.Second, 2), breaker.OpenTimeout(time.Minute))
		gb := gobreaker.NewCircuitBreaker[struct{}](gobreaker.Settings{
			Interval: 10 * time.Second, BucketPeriod: 5 * time.Second, Timeout: time.Minute,
			ReadyToTrip: func(c gobreaker.Counts) bool {
				done := c.TotalSuccesses + c.TotalFailures
				return done >= 2 && float64(c.TotalFailures) >= 0.5*float64(done)
			},
		})
		a, ga := startRK(b), startGB(gb) // t=0, bucket 0
		time.Sleep(6 * time.Second)      // bucket 1
		startRK(b).finish(errBoom)
		startGB(gb).finish(errBoom)
		startRK(b).finish(nil)
		startGB(gb).finish(nil)
		time.Sleep(5 * time.Second) // bucket 2: bucket 0 left the window
		a.finish(errBoom)
		ga.finish(errBoom)
		t.Logf("rk %v %+v, gb %v %+v", b.State(), b.Counts(), gbState(gb.State()), gb.Counts())
		if got, want := b.State(), gbState(gb.State()); got != want {
			t.Errorf("state: resiliencekit %v, gobreaker %v", got, want)
		}
	})
}

// The same schedule, with and without a look at the state (a dashboard's
// Snapshot, say) just before the slow call ends: the look moves the
// window on, so the late success is dropped, and the third failure opens
// the breaker; without it the breaker stays closed. Observing the
// breaker changes its verdict.
func TestReviewObservingStateChangesVerdict(t *testing.T) {
	run := func(look bool) resilience.State {
		var st resilience.State
		synctest.Test(t, func(t *testing.T) {
			b := breaker.New("x", breaker.ConsecutiveFailures(3), breaker.Window(10*time.Second, 2), breaker.OpenTimeout(time.Minute))
			a := startRK(b)
			time.Sleep(6 * time.Second)
			startRK(b).finish(errBoom)
			startRK(b).finish(errBoom)
			time.Sleep(5 * time.Second)
			if look {
				_ = b.Snapshot()
			}
			a.finish(nil)
			startRK(b).finish(errBoom)
			st = b.State()
		})
		return st
	}
	with, without := run(true), run(false)
	if with != without {
		t.Errorf("with a Snapshot before the slow call ends: %v; without: %v", with, without)
	}
}

// One bucket: a look at the state after the interval passed renews the
// window (new generation) and the slow call's failure is dropped; without
// it, done renews the window after its generation check and counts the
// failure in the new window (Requests 0, TotalFailures 1), opening the
// breaker.
func TestReviewOneBucketObservingChangesVerdict(t *testing.T) {
	run := func(look bool) (resilience.State, breaker.Counts) {
		var st resilience.State
		var c breaker.Counts
		synctest.Test(t, func(t *testing.T) {
			b := breaker.New("x", breaker.ConsecutiveFailures(2), breaker.Window(10*time.Second, 1), breaker.OpenTimeout(time.Minute))
			a := startRK(b)
			startRK(b).finish(errBoom)
			time.Sleep(11 * time.Second)
			if look {
				_ = b.State()
			}
			a.finish(errBoom)
			st, c = b.State(), b.Counts()
		})
		return st, c
	}
	sw, cw := run(true)
	so, co := run(false)
	t.Logf("with a look: %v %+v; without: %v %+v", sw, cw, so, co)
	if sw != so || cw != co {
		t.Errorf("observing changed the outcome")
	}
	if co.TotalFailures+co.TotalSuccesses+co.TotalExclusions > co.Requests {
		t.Errorf("more outcomes than requests in the window: %+v", co)
	}
}
