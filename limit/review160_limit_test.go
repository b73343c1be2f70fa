package limit_test

import (
	"context"
	"errors"
	"math"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/resiliencekit/resiliencekit/limit"
	"github.com/resiliencekit/resiliencekit/resilience"
)

var errR160 = errors.New("review160: 503")

// The caller's own errors and cancellations, and refusals, never shrink
// an adaptive limit, however many.
func TestReview160CallerErrorsNeverShrink(t *testing.T) {
	l := limit.NewAIMD(limit.Initial(10), limit.Max(10))
	for range 10000 {
		for _, err := range []error{context.Canceled, resilience.Rejected(errR160), resilience.Permanent(errR160), errors.Join(errR160, context.Canceled)} {
			tk, e := l.Acquire(context.Background())
			if e != nil {
				t.Fatal(e)
			}
			l.Release(tk, err)
		}
	}
	if l.Limit() != 10 {
		t.Errorf("limit %d after only caller errors and cancellations, want 10", l.Limit())
	}
}

// Extreme sizes.
func TestReview160LimitExtremes(t *testing.T) {
	for _, l := range []*limit.Limiter{
		limit.NewFixed(math.MaxInt, limit.MaxWaiting(math.MaxInt)),
		limit.NewAIMD(limit.Initial(math.MaxInt), limit.Max(math.MaxInt), limit.Min(math.MaxInt), limit.MaxWaiting(math.MaxInt)),
		limit.NewAIMD(limit.Initial(math.MaxInt-1), limit.Max(math.MaxInt), limit.Backoff(0.5)),
	} {
		var tks []limit.Ticket
		for range 1000 {
			tk, err := l.Acquire(context.Background())
			if err != nil {
				t.Fatalf("refused under a limit of %d: %v", l.Limit(), err)
			}
			tks = append(tks, tk)
		}
		for i, tk := range tks {
			if i%2 == 0 {
				l.Release(tk, errR160)
			} else {
				l.Release(tk, nil)
			}
		}
		if l.InFlight() != 0 || l.Limit() < 1 {
			t.Errorf("in flight %d, limit %d", l.InFlight(), l.Limit())
		}
		tk, err := l.AcquireExtra(func() {})
		if err != nil {
			t.Errorf("extra refused under limit %d", l.Limit())
		}
		l.Release(tk, nil)
	}
	// Min 1 and Backoff 0.5 through a storm of failures: always room for one.
	l := limit.NewAIMD(limit.Initial(1000), limit.Backoff(0.5))
	for range 100000 {
		tk, err := l.Acquire(context.Background())
		if err != nil {
			t.Fatalf("refused with nothing in flight, limit %d", l.Limit())
		}
		l.Release(tk, errR160)
	}
	if l.Limit() != 1 {
		t.Errorf("limit %d", l.Limit())
	}
	for _, f := range []func(){
		func() { limit.NewFixed(0) }, func() { limit.NewFixed(math.MinInt) },
		func() { limit.MaxWaiting(-1) }, func() { limit.Backoff(math.NaN()) }, func() { limit.Backoff(1) },
		func() { limit.Backoff(math.Inf(-1)) }, func() { limit.Backoff(0.4999) },
		func() { limit.NewAIMD(limit.Min(5), limit.Initial(4)) }, func() { limit.NewAIMD(limit.Initial(1001)) },
		func() { limit.NewFixed(3, limit.Initial(2)) },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("no panic")
				}
			}()
			f()
		}()
	}
}

// Many goroutines on an adaptive limit with a queue, failures and
// successes mixed, callers giving up: never more in flight than the limit
// at the moment of admission, every waiter served or refused exactly
// once, all slots back.
func TestReview160AIMDExactUnderChurn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := limit.NewAIMD(limit.Initial(8), limit.Max(16), limit.MaxWaiting(64))
		var mu sync.Mutex
		in, most := 0, 0
		var wg sync.WaitGroup
		for i := range 2000 {
			wg.Go(func() {
				time.Sleep(time.Duration(i%97) * time.Millisecond)
				ctx, cancel := context.WithTimeout(context.Background(), time.Duration(1+i%13)*time.Millisecond)
				defer cancel()
				tk, err := l.Acquire(ctx)
				if err != nil {
					return
				}
				mu.Lock()
				in++
				most = max(most, in)
				mu.Unlock()
				time.Sleep(time.Duration(i%5) * time.Millisecond)
				mu.Lock()
				in--
				mu.Unlock()
				if i%7 == 0 {
					l.Release(tk, errR160)
				} else {
					l.Release(tk, nil)
				}
			})
		}
		wg.Wait()
		if most > 16 {
			t.Errorf("%d in flight, max limit 16", most)
		}
		if l.InFlight() != 0 || l.Waiting() != 0 {
			t.Errorf("in flight %d waiting %d", l.InFlight(), l.Waiting())
		}
	})
}
