package retrypolicy_test

import (
	"context"
	"errors"
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/resiliencekit/resiliencekit/internal/classify"
	"github.com/resiliencekit/resiliencekit/resilience"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

// Concurrent Takes never take more than the quota allows: a tenth of the
// window's allowance in a bucket, the allowance over the window.
func TestReview160ConcurrentTakesExact(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := retrypolicy.NewQuota(0, 10, 10*time.Second) // 100 a window, 10 a bucket
		total := 0
		for b := range 25 {
			var got atomic.Int64
			var wg sync.WaitGroup
			for range 64 {
				wg.Go(func() {
					for range 4 {
						if q.Take() {
							got.Add(1)
						}
					}
				})
			}
			wg.Wait()
			if got.Load() != 10 {
				t.Errorf("bucket %d: %d taken, want 10", b, got.Load())
			}
			if a := q.Available(); a != 0 {
				t.Errorf("bucket %d: available %d after spending", b, a)
			}
			total += int(got.Load())
			time.Sleep(time.Second)
		}
	})
}

// Extreme values neither panic nor go negative, and never make Available
// lie about what Take gives.
func TestReview160QuotaExtremes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		for _, c := range []struct {
			ratio, floor float64
			w            time.Duration
		}{
			{math.MaxFloat64, 0, 0},
			{0, math.MaxFloat64, 0},
			{math.MaxFloat64, math.MaxFloat64, time.Duration(math.MaxInt64)},
			{0, 1e-300, 10 * time.Millisecond},
			{1e-300, 0, time.Duration(math.MaxInt64)},
			{0, 0, 0},
			{math.SmallestNonzeroFloat64, math.SmallestNonzeroFloat64, 10 * time.Millisecond},
		} {
			q := retrypolicy.NewQuota(c.ratio, c.floor, c.w)
			for range 50 {
				p := retrypolicy.New(retrypolicy.MaxAttempts(2), retrypolicy.WithQuota(q), retrypolicy.WithSleep(func(context.Context, time.Duration) error { return nil }))
				retrypolicy.Do(context.Background(), p, func(context.Context) (int, error) { return 1, nil })
			}
			a := q.Available()
			if a < 0 {
				t.Errorf("%+v: available %d", c, a)
			}
			took := q.Take()
			if a > 0 != took {
				t.Errorf("%+v: Available %d but Take %v", c, a, took)
			}
		}
		for _, c := range [][2]float64{{math.NaN(), 0}, {0, math.NaN()}, {math.Inf(1), 0}, {0, math.Inf(1)}, {-1e-300, 0}, {0, -1e-300}} {
			func() {
				defer func() {
					if recover() == nil {
						t.Errorf("NewQuota(%v, %v) did not panic", c[0], c[1])
					}
				}()
				retrypolicy.NewQuota(c[0], c[1], 0)
			}()
		}
		for _, w := range []time.Duration{-1, 1, 9 * time.Millisecond, time.Duration(math.MinInt64)} {
			func() {
				defer func() {
					if recover() == nil {
						t.Errorf("NewQuota window %v did not panic", w)
					}
				}()
				retrypolicy.NewQuota(0.1, 1, w)
			}()
		}
	})
}

// A retry refused by the quota is not sent, and a retry whose sleep the
// caller's cancellation ended gives its charge back: after many such
// calls, the quota is whole.
func TestReview160QuotaRefusedNotSentAndCanceledRefunded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := retrypolicy.NewQuota(0, 1, 10*time.Second) // 1 a bucket
		p := retrypolicy.New(retrypolicy.MaxAttempts(5), retrypolicy.BaseDelay(100*time.Millisecond), retrypolicy.Jitter(retrypolicy.None), retrypolicy.WithQuota(q))
		// Spend the bucket.
		if !q.Take() {
			t.Fatal("setup")
		}
		n := 0
		_, err := retrypolicy.Do(context.Background(), p, func(context.Context) (int, error) { n++; return 0, errors.New("503") })
		if n != 1 || !errors.Is(err, retrypolicy.ErrQuotaExhausted) {
			t.Errorf("quota spent: %d attempts sent, err %v", n, err)
		}
		time.Sleep(time.Second)
		before := q.Available()
		for range 20 {
			ctx, cancel := context.WithCancel(context.Background())
			go func() { time.Sleep(50 * time.Millisecond); cancel() }()
			retrypolicy.Do(ctx, p, func(context.Context) (int, error) { return 0, errors.New("503") })
			cancel()
		}
		if a := q.Available(); a != before {
			t.Errorf("available %d before, %d after 20 calls canceled in their first backoff", before, a)
		}
	})
}

// A retry refused by a gate inside the operation (never sent: a
// pipeline marks it so, classify.Unsent) is not charged either, as the
// loop gives back a charge refused by its guard; one sent, whose answer
// the client refused, keeps its charge (review132).
func TestReview160QuotaRejectedAttemptCharge(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := retrypolicy.NewQuota(0, 1, 10*time.Second)
		p := retrypolicy.New(retrypolicy.MaxAttempts(3), retrypolicy.BaseDelay(10*time.Millisecond), retrypolicy.Jitter(retrypolicy.None), retrypolicy.WithQuota(q))
		before := q.Available()
		n := 0
		retrypolicy.Do(context.Background(), p, func(context.Context) (int, error) {
			if n++; n == 1 {
				return 0, errors.New("503")
			}
			return 0, classify.Unsent(resilience.Rejected(errors.New("concurrency limit reached")))
		})
		if a := q.Available(); a != before {
			t.Errorf("available %d before, %d after a retry refused before it was sent", before, a)
		}
	})
}
