package retrypolicy_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/resiliencekit/resiliencekit/resilience"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

var review87Open = errors.New("review87: open")
var review87Fail = errors.New("review87: transient")

// Many goroutines, a guard that flaps, attempts refused as they are sent
// (a rejected error matching the guard's), loops resumed: the quota's
// count of retries is exactly the retries sent (none uncharged, none given
// back twice), and within its bound.
func TestReview87_QuotaFlappingGuard(t *testing.T) {
	for run := 0; run < 6; run++ {
		ratio := []float64{0.5, 20}[run%2]
		q := retrypolicy.NewQuota(ratio, 0, time.Minute)
		p := retrypolicy.New(retrypolicy.MaxAttempts(6), retrypolicy.WithQuota(q),
			retrypolicy.WithSleep(func(ctx context.Context, d time.Duration) error {
				if rand.IntN(20) == 0 {
					return context.Canceled // a sleep that fails: charge given back
				}
				return nil
			}))
		var open atomic.Bool
		stop := make(chan struct{})
		go func() {
			for {
				select {
				case <-stop:
					return
				default:
					open.Store(rand.IntN(3) == 0)
					time.Sleep(time.Duration(rand.IntN(50)) * time.Microsecond)
				}
			}
		}()
		var retriesSent, calls atomic.Int64
		var wg sync.WaitGroup
		for g := 0; g < 64; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < 200; i++ {
					calls.Add(1)
					var sent int64
					refused := false // sticky, as the pipeline's guard is (c.refused)
					guard := func() error {
						if refused || open.Load() {
							return review87Open
						}
						return nil
					}
					op := func(ctx context.Context) (int, error) {
						refused = false
						if open.Load() && rand.IntN(2) == 0 { // refused as it was sent
							refused = true
							return 0, resilience.Rejected(review87Open)
						}
						sent++
						if rand.IntN(4) == 0 {
							return 1, nil
						}
						return 0, review87Fail
					}
					_, err := retrypolicy.DoGuarded(context.Background(), p, guard, op)
					for k := 0; k < 5 && err != nil; k++ {
						var e *retrypolicy.Error
						if !errors.As(err, &e) || !errors.Is(e.Reason, review87Open) {
							break
						}
						refused = false
						_, err = retrypolicy.Resume(context.Background(), p, guard, err, op)
					}
					if sent > 1 {
						retriesSent.Add(sent - 1)
					}
				}
			}()
		}
		wg.Wait()
		close(stop)
		charged := retrypolicy.Review87Charged(q)
		deposits := retrypolicy.Review87Calls(q)
		t.Logf("run %d: calls %d (quota counted %d), retries sent %d, charged %d", run, calls.Load(), deposits, retriesSent.Load(), charged)
		if int64(charged) != retriesSent.Load() {
			t.Errorf("run %d: quota counts %d retries, %d sent", run, charged, retriesSent.Load())
		}
		if float64(retriesSent.Load()) > ratio*float64(deposits) {
			t.Errorf("run %d: %d retries sent for %d calls: over the bound", run, retriesSent.Load(), deposits)
		}
	}
}

// Resume on an error after a stop with ctx done, or max attempts: nothing charged.
func TestReview87_ResumeNoCharge(t *testing.T) {
	q := retrypolicy.NewQuota(1, 100, time.Minute)
	p := retrypolicy.New(retrypolicy.MaxAttempts(2), retrypolicy.WithQuota(q), retrypolicy.WithSleep(func(context.Context, time.Duration) error { return nil }))
	closed := true
	guard := func() error {
		if closed {
			return nil
		}
		return review87Open
	}
	n := 0
	op := func(ctx context.Context) (int, error) {
		n++
		closed = false // opens after the first attempt: stop after backoff
		return 0, review87Fail
	}
	_, err := retrypolicy.DoGuarded(context.Background(), p, guard, op)
	if c := retrypolicy.Review87Charged(q); c != 0 {
		t.Fatalf("stopped loop keeps %d charges (err %v)", c, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	retrypolicy.Resume(ctx, p, guard, err, op)
	if c := retrypolicy.Review87Charged(q); c != 0 {
		t.Fatalf("resume with ctx done charged %d", c)
	}
	closed = true
	// refused again as sent: give back
	refuse := func(ctx context.Context) (int, error) { return 0, resilience.Rejected(review87Open) }
	closed = false
	_, err2 := retrypolicy.Resume(context.Background(), p, func() error { return review87Open }, err, refuse)
	if c := retrypolicy.Review87Charged(q); c != 0 {
		t.Fatalf("resume refused as sent keeps %d (err %v)", c, err2)
	}
	closed = true
	_, err3 := retrypolicy.Resume(context.Background(), p, guard, err2, op)
	if c := retrypolicy.Review87Charged(q); c != 1 || n != 2 {
		t.Fatalf("resumed retry: charged %d, attempts %d (err %v)", c, n, err3)
	}
}
