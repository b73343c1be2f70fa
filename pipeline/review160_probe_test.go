package pipeline_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/limit"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/resilience"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
	"github.com/resiliencekit/resiliencekit/throttle"
)

// A half-open probe that the concurrency limit refuses (a slow call
// admitted before the breaker opened still holds the only slot) is not
// sent: it must not leave the breaker stuck, nor count against the
// dependency. Once the slot is free, the next call probes and closes it.
func TestReview160ProbeRefusedByLimitDoesNotWedgeBreaker(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := breaker.New("r160", breaker.ConsecutiveFailures(3), breaker.OpenTimeout(100*time.Millisecond))
		lim := limit.NewFixed(1)
		th := throttle.New()
		p := pipeline.New(pipeline.WithBreaker(b), pipeline.WithThrottle(th), pipeline.WithLimit(lim),
			pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(2))))
		release := make(chan struct{})
		var wg sync.WaitGroup
		wg.Go(func() { // slow call, holds the slot
			pipeline.Do(context.Background(), p, func(ctx context.Context) (int, error) { <-release; return 1, nil })
		})
		synctest.Wait()
		// Open the breaker without the limit: use b directly.
		for range 3 {
			b.Execute(context.Background(), func(context.Context) error { return errReview160Blip })
		}
		if b.State() != resilience.StateOpen {
			t.Fatalf("setup: state %v", b.State())
		}
		time.Sleep(150 * time.Millisecond)
		// The probe: refused by the limit.
		_, err := pipeline.Do(context.Background(), p, func(ctx context.Context) (int, error) { return 1, nil })
		if !errors.Is(err, limit.ErrLimited) {
			t.Fatalf("setup: probe should be refused by the limit, got %v", err)
		}
		close(release)
		wg.Wait()
		// Slot free, dependency healthy: within an open timeout a call must get through.
		ok := false
		for range 5 {
			_, err = pipeline.Do(context.Background(), p, func(ctx context.Context) (int, error) { return 1, nil })
			if err == nil {
				ok = true
				break
			}
			time.Sleep(110 * time.Millisecond)
		}
		if !ok {
			t.Errorf("breaker %v, last error %v: a probe refused by the limit wedged the breaker", b.State(), err)
		}
		if th.RejectProbability() != 0 {
			t.Errorf("throttle p = %v after a refusal and a success", th.RejectProbability())
		}
	})
}

// Many goroutines through a fixed limit with a queue, callers canceling
// at random, some operations panicking: never more in flight than the
// limit, every slot back at the end, nobody left waiting.
func TestReview160LimitExactUnderChurn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const n = 3
		lim := limit.NewFixed(n, limit.MaxWaiting(50))
		p := pipeline.New(pipeline.WithLimit(lim), pipeline.WithTimeBudget(200*time.Millisecond))
		var mu sync.Mutex
		in, most := 0, 0
		var wg sync.WaitGroup
		for i := range 400 {
			wg.Go(func() {
				time.Sleep(time.Duration(i%37) * time.Millisecond)
				ctx, cancel := context.WithCancel(context.Background())
				if i%5 == 0 {
					go func() { time.Sleep(time.Duration(i%11) * time.Millisecond); cancel() }()
				} else {
					defer cancel()
				}
				func() {
					defer func() { recover() }()
					pipeline.Do(ctx, p, func(ctx context.Context) (int, error) {
						mu.Lock()
						in++
						most = max(most, in)
						mu.Unlock()
						defer func() { mu.Lock(); in--; mu.Unlock() }()
						time.Sleep(time.Duration(1+i%7) * time.Millisecond)
						if i%13 == 0 {
							panic("r160")
						}
						return 1, nil
					})
				}()
			})
		}
		wg.Wait()
		if most > n {
			t.Errorf("%d in flight at once through a limit of %d", most, n)
		}
		if lim.InFlight() != 0 || lim.Waiting() != 0 {
			t.Errorf("after all calls: %d in flight, %d waiting", lim.InFlight(), lim.Waiting())
		}
	})
}

// A waiter whose context ends leaves the queue at once, and the slot it
// would have had goes to the next waiter, not lost.
func TestReview160CanceledWaiterLeavesAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lim := limit.NewAIMD(limit.Initial(1), limit.Min(1), limit.Max(1), limit.MaxWaiting(10))
		tk, err := lim.Acquire(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		ctx1, cancel1 := context.WithCancel(context.Background())
		var got2 limit.Ticket
		var wg sync.WaitGroup
		var err1, err2 error
		wg.Go(func() { _, err1 = lim.Acquire(ctx1) })
		synctest.Wait()
		wg.Go(func() { got2, err2 = lim.Acquire(context.Background()) })
		synctest.Wait()
		if lim.Waiting() != 2 {
			t.Fatalf("waiting %d", lim.Waiting())
		}
		cancel1()
		synctest.Wait()
		if lim.Waiting() != 1 || !errors.Is(err1, limit.ErrLimited) {
			t.Errorf("after cancel: waiting %d, err1 %v", lim.Waiting(), err1)
		}
		// Caller's cancellation taught nothing: the limit is still 1, and
		// the release hands the slot to waiter 2.
		lim.Release(tk, context.Canceled)
		synctest.Wait()
		wg.Wait()
		if err2 != nil || got2 == 0 {
			t.Errorf("waiter 2 not served: %v", err2)
		}
		if lim.InFlight() != 1 {
			t.Errorf("in flight %d, want 1", lim.InFlight())
		}
		lim.Release(got2, nil)
		if lim.InFlight() != 0 {
			t.Errorf("in flight %d, want 0", lim.InFlight())
		}
	})
}

// runtime.Goexit in the operation while it holds a slot of the limit and a
// count of the throttle: both come back, and the throttle learns nothing.
func TestReview160GoexitGivesBackSlotAndThrottle(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lim := limit.NewAIMD(limit.Initial(2), limit.MaxWaiting(5))
		th := throttle.New()
		p := pipeline.New(pipeline.WithLimit(lim), pipeline.WithThrottle(th),
			pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(3))))
		for range 50 {
			done := make(chan struct{})
			go func() {
				defer close(done)
				pipeline.Do(context.Background(), p, func(ctx context.Context) (int, error) {
					runtime_Goexit()
					return 0, nil
				})
			}()
			<-done
		}
		if lim.InFlight() != 0 {
			t.Errorf("in flight %d after 50 Goexits", lim.InFlight())
		}
		if lim.Limit() != 2 {
			t.Errorf("limit moved to %d by Goexits", lim.Limit())
		}
		// 30 accepts then 10 failures: 40 requests, nothing refused
		// unless the Goexits left requests counted.
		for range 30 {
			tk, err := th.Admit()
			if err == nil {
				th.Done(tk, nil)
			}
		}
		for range 10 {
			tk, err := th.Admit()
			if err == nil {
				th.Done(tk, errReview160Blip)
			}
		}
		// 40 requests, 30 accepts: (40 - 2*31)/41 < 0: nothing refused.
		if p := th.RejectProbability(); p > 0 {
			t.Errorf("p = %v: the Goexits left requests counted", p)
		}
	})
}

var runtime_Goexit = runtimeGoexit
