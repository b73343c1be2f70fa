package breaker_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/resilience"
)

type review141Store struct {
	sync func(ctx context.Context, n int, s breaker.Sync) (breaker.Fleet, error)
	n    atomic.Int32
}

func (s *review141Store) Sync(ctx context.Context, name string, sy breaker.Sync) (breaker.Fleet, error) {
	return s.sync(ctx, int(s.n.Add(1)), sy)
}

func review141New(st breaker.SharedStore) *breaker.Breaker {
	return breaker.New("r141", breaker.Shared(st), breaker.FailureRate(0.5, 10), breaker.Window(10*time.Second, 10),
		breaker.FlushInterval(100*time.Millisecond), breaker.OpenTimeout(time.Second))
}

// A store that answers the hello "open" within the wait: the first call
// is refused, the operation not called.
func TestReview141HelloOpenRefusesFirstCall(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := &review141Store{sync: func(ctx context.Context, n int, s breaker.Sync) (breaker.Fleet, error) {
			time.Sleep(5 * time.Millisecond)
			return breaker.Fleet{State: resilience.StateOpen, Generation: 7, ChangedFor: 50 * time.Millisecond}, nil
		}}
		b := review141New(st)
		defer b.Close()
		called := false
		err := b.Execute(context.Background(), func(context.Context) error { called = true; return nil })
		if called || !errors.Is(err, breaker.ErrOpen) {
			t.Fatalf("first call at an open fleet: called %v err %v", called, err)
		}
	})
}

// Whatever the hello does (error, hang, late answer), no call fails and
// none waits more than min(interval/10, a tenth of its time left).
func TestReview141HelloNeverFailsACall(t *testing.T) {
	type kind struct {
		name string
		sync func(ctx context.Context, n int, s breaker.Sync) (breaker.Fleet, error)
	}
	kinds := []kind{
		{"error", func(ctx context.Context, n int, s breaker.Sync) (breaker.Fleet, error) {
			return breaker.Fleet{}, errors.New("store down")
		}},
		{"hang", func(ctx context.Context, n int, s breaker.Sync) (breaker.Fleet, error) {
			<-ctx.Done()
			return breaker.Fleet{}, ctx.Err()
		}},
		{"slow closed", func(ctx context.Context, n int, s breaker.Sync) (breaker.Fleet, error) {
			select {
			case <-time.After(50 * time.Millisecond):
			case <-ctx.Done():
				return breaker.Fleet{}, ctx.Err()
			}
			return breaker.Fleet{State: resilience.StateClosed, Generation: 1}, nil
		}},
		{"hello error then fine", func(ctx context.Context, n int, s breaker.Sync) (breaker.Fleet, error) {
			if n == 1 {
				return breaker.Fleet{}, errors.New("first fails")
			}
			return breaker.Fleet{State: resilience.StateClosed, Generation: 1}, nil
		}},
	}
	for _, k := range kinds {
		for _, budget := range []time.Duration{0, time.Millisecond, 15 * time.Millisecond, 50 * time.Millisecond, time.Second} {
			synctest.Test(t, func(t *testing.T) {
				b := review141New(&review141Store{sync: k.sync})
				defer b.Close()
				for i := 0; i < 5; i++ {
					ctx := context.Background()
					cancel := context.CancelFunc(func() {})
					if budget > 0 {
						ctx, cancel = context.WithTimeout(ctx, budget)
					}
					start := time.Now()
					var calledAt time.Duration = -1
					err := b.Execute(ctx, func(context.Context) error { calledAt = time.Since(start); return nil })
					cancel()
					bound := 10 * time.Millisecond
					if budget > 0 && budget/10 < bound {
						bound = budget / 10
					}
					if err != nil || calledAt < 0 {
						t.Errorf("%s budget %v call %d: err %v called %v", k.name, budget, i, err, calledAt >= 0)
					}
					if calledAt > bound {
						t.Errorf("%s budget %v call %d: waited %v, bound %v", k.name, budget, i, calledAt, bound)
					}
					time.Sleep(time.Millisecond)
				}
			})
		}
	}
}

// A call with no deadline whose caller cancels during the wait goes on
// (its operation called with the context canceled, as a plain client's).
func TestReview141HelloCancelDuringWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := review141New(&review141Store{sync: func(ctx context.Context, n int, s breaker.Sync) (breaker.Fleet, error) {
			<-ctx.Done()
			return breaker.Fleet{}, ctx.Err()
		}})
		defer b.Close()
		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(3*time.Millisecond, cancel)
		called := false
		err := b.Execute(ctx, func(ctx context.Context) error { called = true; return ctx.Err() })
		if !called {
			t.Fatalf("the operation was not called: %v", err)
		}
		// The next call must not wait 10 ms again: greeted or not?
		start := time.Now()
		_ = b.Execute(context.Background(), func(context.Context) error { return nil })
		if w := time.Since(start); w > 10*time.Millisecond {
			t.Errorf("second call waited %v", w)
		}
	})
}

// Close during the hello returns within two intervals; calls made then
// do not hang.
func TestReview141CloseDuringHello(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := review141New(&review141Store{sync: func(ctx context.Context, n int, s breaker.Sync) (breaker.Fleet, error) {
			<-ctx.Done()
			return breaker.Fleet{}, ctx.Err()
		}})
		done := make(chan time.Duration)
		go func() {
			start := time.Now()
			_ = b.Close()
			done <- time.Since(start)
		}()
		time.Sleep(time.Millisecond)
		start := time.Now()
		called := false
		err := b.Execute(context.Background(), func(context.Context) error { called = true; return nil })
		if !called || err != nil || time.Since(start) > 10*time.Millisecond {
			t.Errorf("call during Close: called %v err %v after %v", called, err, time.Since(start))
		}
		if d := <-done; d > 200*time.Millisecond {
			t.Errorf("Close took %v", d)
		}
	})
}
