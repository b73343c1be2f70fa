package retrypolicy

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

var errReview131Reset = errors.New("connection reset by peer") // unmarked: transient

// A healthy dependency, quiet for a while (a few calls a second), whose
// pooled connections were closed by the server during the lull: the next
// burst of N concurrent calls each meets a reset on its first attempt and
// succeeds on its retry. A plain client (same policy, no quota) completes
// every call. With the quota docs/retries.md recommends
// (NewQuota(0.1, 10, 10s)), how many of them fail? As many as the burst
// is over a tenth of the window's allowance (107 here: 10), the cost of
// the rate that Quota documents; this holds it to that figure.
func TestReview131QuotaBurstOfResetsAfterLull(t *testing.T) {
	for _, n := range []int{8, 20, 50} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				q := NewQuota(0.1, 10, 10*time.Second)
				p := New(MaxAttempts(3), WithQuota(q))
				// quiet traffic: 2 calls a second for 30 s, all fine
				for range 60 {
					_, _ = Do(context.Background(), p, func(context.Context) (int, error) { return 1, nil })
					time.Sleep(500 * time.Millisecond)
				}
				var failed atomic.Int64
				var wg sync.WaitGroup
				for range n {
					wg.Go(func() {
						first := true
						_, err := Do(context.Background(), p, func(context.Context) (int, error) {
							if first {
								first = false
								return 0, errReview131Reset
							}
							return 1, nil
						})
						if err != nil {
							failed.Add(1)
						}
					})
				}
				wg.Wait()
				t.Logf("n=%d failed=%d", n, failed.Load())
				if want := max(n-10, 0); failed.Load() != int64(want) {
					t.Errorf("burst of %d resets after a lull, healthy dependency: %d calls failed with the recommended quota, documented %d (a plain client fails none)", n, failed.Load(), want)
				}
			})
		})
	}
}

// Steady traffic, 200 calls a second, 2.5% transient failures in bursts
// of 10 concurrent failures every 2 s (a server recycling its idle
// connections): the failed share is a quarter of the 10% ratio, so no
// retry should be refused.
func TestReview131QuotaSteadyBurstyFailures(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := NewQuota(0.1, 10, 10*time.Second)
		p := New(MaxAttempts(3), WithQuota(q), BaseDelay(time.Millisecond))
		var failed, calls atomic.Int64
		for tick := range 20 * 20 { // 20 s in 50 ms ticks
			var wg sync.WaitGroup
			for i := range 10 {
				bad := tick%40 == 0 // every 2 s, the 10 calls of this tick meet a reset
				wg.Go(func() {
					calls.Add(1)
					first := true
					_, err := Do(context.Background(), p, func(context.Context) (int, error) {
						if bad && first {
							first = false
							return 0, errReview131Reset
						}
						return 1, nil
					})
					if err != nil {
						failed.Add(1)
					}
				})
				_ = i
			}
			wg.Wait()
			time.Sleep(50 * time.Millisecond)
		}
		if failed.Load() > 0 {
			t.Errorf("%d of %d calls failed against a healthy dependency with 2.5%% bursty resets", failed.Load(), calls.Load())
		}
	})
}

// Many goroutines race for the last retries of a window: never more taken
// than allowed, Available never negative.
func TestReview131QuotaRaceLastTokens(t *testing.T) {
	for round := range 20 {
		synctest.Test(t, func(t *testing.T) {
			q := NewQuota(0.5, 0, 10*time.Second)
			for range 100 { // 100 calls: 50 retries in the window, 5 in a bucket
				q.deposit()
			}
			var got atomic.Int64
			var wg sync.WaitGroup
			for range 64 {
				wg.Go(func() {
					for range 10 {
						if q.Take() {
							got.Add(1)
						}
						if q.Available() < 0 {
							t.Error("negative")
						}
					}
				})
			}
			wg.Wait()
			if got.Load() != 5 {
				t.Errorf("round %d: %d retries taken in one bucket, want 5", round, got.Load())
			}
		})
	}
}

// Real time, real goroutines, across bucket edges (window 100 ms, 10 ms
// buckets): 1000 calls deposited at once, then 8 goroutines take retries
// for 80 ms, inside the calls' window: never more than 0.2*1000 = 200 in
// all, never more than 20 in one bucket.
func TestReview131QuotaRaceRealTime(t *testing.T) {
	for round := range 10 {
		q := NewQuota(0.2, 0, 100*time.Millisecond)
		for range 1000 {
			q.deposit()
		}
		start := q.clock.Epoch()
		stop := time.Now().Add(80 * time.Millisecond)
		var wg sync.WaitGroup
		var mu sync.Mutex
		per := map[int64]int{}
		var taken atomic.Int64
		for range 8 {
			wg.Go(func() {
				for time.Now().Before(stop) {
					if b, ok := q.take(nil); ok {
						taken.Add(1)
						mu.Lock()
						per[b]++
						mu.Unlock()
					}
				}
			})
		}
		wg.Wait()
		if q.clock.Epoch()-start >= 10 {
			t.Logf("round %d: machine too slow, window passed", round)
			continue
		}
		if taken.Load() > 200 {
			t.Errorf("round %d: %d retries taken, quota allows 200", round, taken.Load())
		}
		for b, n := range per {
			if n > 20 {
				t.Errorf("round %d: bucket %d: %d retries, cap 20", round, b, n)
			}
		}
	}
}

// 1e6 calls at a steady rate, each with a retry: the share of retries
// allowed converges on the ratio (plus floor), no drift.
func TestReview131QuotaNoDrift(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := NewQuota(0.1, 0, 10*time.Second)
		const perMs = 10
		var taken int
		var firstHalf int
		for ms := range 100_000 { // 100 s, 1e6 calls
			for range perMs {
				q.deposit()
				if q.Take() {
					taken++
				}
			}
			if ms == 49_999 {
				firstHalf = taken
			}
			time.Sleep(time.Millisecond)
		}
		second := taken - firstHalf
		// second half: steady state, 500k calls, ratio 0.1: ~50k retries
		if math.Abs(float64(second)-50_000) > 1_000 {
			t.Errorf("steady state: %d retries for 500000 calls, want about 50000", second)
		}
		if taken > 100_000+5_000 {
			t.Errorf("total %d retries for 1e6 calls at ratio 0.1", taken)
		}
	})
}

// Extreme options: the largest ratio and floor that NewQuota accepts, a
// window near MaxInt64.
func TestReview131QuotaExtremes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		for _, c := range []struct {
			ratio, floor float64
			w            time.Duration
		}{
			{math.MaxFloat64, 0, 0},
			{0, math.MaxFloat64, 0},
			{math.MaxFloat64, math.MaxFloat64, time.Duration(math.MaxInt64)},
			{1, 1, time.Duration(math.MaxInt64)},
			{math.SmallestNonzeroFloat64, math.SmallestNonzeroFloat64, 10 * time.Millisecond},
		} {
			q := NewQuota(c.ratio, c.floor, c.w)
			q.deposit()
			a := q.Available()
			ok := q.Take()
			b := q.Available()
			if a < 0 || b < 0 {
				t.Errorf("%v: negative", c)
			}
			if c.ratio >= 1 || c.floor >= 1 {
				if !ok || a < 1 {
					t.Errorf("%+v: refused (available %d)", c, a)
				}
			} else if ok {
				t.Errorf("%+v: tiny quota allowed a retry", c)
			}
		}
	})
}
