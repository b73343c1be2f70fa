package retrypolicy_test

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/resiliencekit/resiliencekit/resilience"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

var errBlip64 = errors.New("blip")

// failOnce returns an op that fails its first attempt and then succeeds: a
// blip a plain client retries through.
func failOnce64() func(context.Context) (int, error) {
	n := 0
	return func(context.Context) (int, error) {
		n++
		if n == 1 {
			return 0, errBlip64
		}
		return 1, nil
	}
}

// A quiet service (one call per window or rarer) whose quota has a ratio of
// 1 (one retry per call) and no floor: each call should count, and allow
// its one retry.
func TestReview64QuietCallCounts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := retrypolicy.NewQuota(1, 0, time.Second)
		p := retrypolicy.New(retrypolicy.WithQuota(q), retrypolicy.BaseDelay(0))
		refused := 0
		for i := range 10 {
			_, err := retrypolicy.Do(context.Background(), p, failOnce64())
			if err != nil {
				refused++
				t.Logf("call %d: %v", i, err)
			}
			time.Sleep(2 * time.Second)
		}
		if refused > 0 {
			t.Errorf("%d of 10 calls of a quiet service refused their one retry with ratio 1", refused)
		}
	})
}

// Same with a gap just over a bucket but under the window: the call should
// stay counted for a whole window.
func TestReview64GapUnderWindow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := retrypolicy.NewQuota(1, 0, time.Second)
		p := retrypolicy.New(retrypolicy.WithQuota(q), retrypolicy.BaseDelay(0))
		refused := 0
		for range 20 {
			if _, err := retrypolicy.Do(context.Background(), p, failOnce64()); err != nil {
				refused++
			}
			time.Sleep(550 * time.Millisecond)
		}
		if refused > 0 {
			t.Errorf("%d of 20 calls refused their one retry with ratio 1", refused)
		}
	})
}

// Exact accounting in fake time: many goroutines, random pacing, each call
// failing every attempt; at every successful retry, the retries of the
// clock's window (buckets e-9..e) must not exceed the allowance, and per
// bucket at most max(floor(allowance/10),1).
func TestReview64QuotaBoundSynctest(t *testing.T) {
	for _, tc := range []struct {
		ratio, floor float64
		window       time.Duration
	}{
		{0.1, 10, 10 * time.Second},
		{0.1, 0, time.Second},
		{0.5, 1, 100 * time.Millisecond},
		{2, 0, 10 * time.Second},
		{0, 3, time.Second},
	} {
		synctest.Test(t, func(t *testing.T) {
			start := time.Now()
			q := retrypolicy.NewQuota(tc.ratio, tc.floor, tc.window)
			bucket := tc.window / 10
			var mu sync.Mutex
			var calls, retries []time.Duration
			lis := resilience.ListenerFunc(func(ev resilience.Event) {
				if ev.Kind == resilience.EventRetry {
					mu.Lock()
					retries = append(retries, time.Since(start))
					mu.Unlock()
				}
			})
			p := retrypolicy.New(retrypolicy.WithQuota(q), retrypolicy.MaxAttempts(0), retrypolicy.WithListener(lis),
				retrypolicy.BaseDelay(time.Millisecond), retrypolicy.MaxDelay(bucket/2))
			var wg sync.WaitGroup
			for g := range 32 {
				wg.Go(func() {
					r := rand.New(rand.NewPCG(uint64(g), 1))
					for range 200 {
						mu.Lock()
						calls = append(calls, time.Since(start))
						mu.Unlock()
						ctx, cancel := context.WithTimeout(context.Background(), 3*tc.window)
						_, err := retrypolicy.Do(ctx, p, func(context.Context) (int, error) {
							return 0, errBlip64
						})
						cancel()
						if !errors.Is(err, retrypolicy.ErrQuotaExhausted) && !errors.Is(err, retrypolicy.ErrOutOfTime) {
							t.Errorf("unexpected error %v", err)
						}
						time.Sleep(time.Duration(r.Int64N(int64(tc.window / 5))))
					}
				})
			}
			wg.Wait()
			// Count per bucket.
			nb := int(time.Since(start)/bucket) + 2
			cb := make([]int, nb)
			rb := make([]int, nb)
			for _, c := range calls {
				cb[int(c/bucket)]++
			}
			for _, r := range retries {
				rb[int(r/bucket)]++
			}
			worst := 0.0
			for e := range nb {
				sc, sr := 0, 0
				for i := max(0, e-9); i <= e; i++ {
					sc += cb[i]
					sr += rb[i]
				}
				allow := math.Floor(tc.ratio*float64(sc) + tc.floor*tc.window.Seconds())
				perB := max(math.Floor(allow/10), 1)
				if float64(sr) > allow+0.5 && rb[e] > 0 {
					t.Errorf("ratio %v floor %v window %v: bucket %d: %d retries in window for %d calls (allow %v)", tc.ratio, tc.floor, tc.window, e, sr, sc, allow)
				}
				if float64(rb[e]) > perB {
					t.Errorf("ratio %v floor %v window %v: bucket %d: %d retries in bucket, per-bucket cap %v", tc.ratio, tc.floor, tc.window, e, rb[e], perB)
				}
				if allow > 0 {
					worst = max(worst, float64(sr)/allow)
				}
			}
			t.Logf("ratio %v floor %v window %v: %d calls, %d retries, worst window use %.2f", tc.ratio, tc.floor, tc.window, len(calls), len(retries), worst)
		})
	}
}

// Real time, -race: many goroutines hammering Take and counting calls;
// the total retries taken over the run never exceed ratio*calls + floor per
// window elapsed (plus one window's slack).
func TestReview64QuotaRealTimeStress(t *testing.T) {
	q := retrypolicy.NewQuota(0.1, 0, 200*time.Millisecond)
	p := retrypolicy.New(retrypolicy.WithQuota(q), retrypolicy.MaxAttempts(2), retrypolicy.BaseDelay(0))
	var calls, rets atomic.Int64
	deadline := time.Now().Add(2 * time.Second)
	var wg sync.WaitGroup
	for range 64 {
		wg.Go(func() {
			for time.Now().Before(deadline) {
				calls.Add(1)
				first := true
				retrypolicy.Do(context.Background(), p, func(context.Context) (int, error) {
					if !first {
						rets.Add(1)
					}
					first = false
					return 0, errBlip64
				})
			}
		})
	}
	wg.Wait()
	c, r := calls.Load(), rets.Load()
	t.Logf("%d calls, %d retries (%.4f)", c, r, float64(r)/float64(c))
	if float64(r) > 0.1*float64(c)*1.15+20 {
		t.Errorf("retries %d over 10%% of %d calls", r, c)
	}
}

// A call canceled mid-backoff gives its retry back.
func TestReview64CancelMidBackoffRefunds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := retrypolicy.NewQuota(0, 5, time.Second) // 5 retries a window; per bucket 1 (floor(5/10) -> 1)
		before := q.Available()
		p := retrypolicy.New(retrypolicy.WithQuota(q), retrypolicy.BaseDelay(50*time.Millisecond), retrypolicy.Jitter(retrypolicy.None))
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error)
		go func() {
			_, err := retrypolicy.Do(ctx, p, func(context.Context) (int, error) { return 0, errBlip64 })
			done <- err
		}()
		time.Sleep(10 * time.Millisecond)
		if q.Available() != before-1 {
			t.Errorf("during the backoff Available = %d, want %d", q.Available(), before-1)
		}
		cancel()
		err := <-done
		if !errors.Is(err, context.Canceled) {
			t.Errorf("err %v", err)
		}
		if q.Available() != before {
			t.Errorf("after cancel mid-backoff Available = %d, want %d (refund)", q.Available(), before)
		}
	})
}

// A custom sleep that panics (or calls Goexit) after the retry was charged:
// is the retry refunded?
func TestReview64SleepPanicRefund(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := retrypolicy.NewQuota(0, 5, time.Second)
		before := q.Available()
		p := retrypolicy.New(retrypolicy.WithQuota(q), retrypolicy.WithSleep(func(context.Context, time.Duration) error { panic("sleep") }))
		func() {
			defer func() { recover() }()
			retrypolicy.Do(context.Background(), p, func(context.Context) (int, error) { return 0, errBlip64 })
		}()
		if q.Available() != before {
			t.Errorf("after a panicking sleep Available = %d, was %d (retry charged, never made)", q.Available(), before)
		}
		done := make(chan struct{})
		go func() {
			defer close(done)
			p := retrypolicy.New(retrypolicy.WithQuota(q), retrypolicy.WithSleep(func(context.Context, time.Duration) error { runtimeGoexit(); return nil }))
			retrypolicy.Do(context.Background(), p, func(context.Context) (int, error) { return 0, errBlip64 })
		}()
		<-done
		if q.Available() != before {
			t.Errorf("after Goexit in sleep Available = %d, was %d", q.Available(), before)
		}
	})
}

// Panics in RetryIf and the operation: the panic propagates, the quota is
// not charged for a retry that never happens.
func TestReview64PanicsInCallbacks(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := retrypolicy.NewQuota(0, 5, time.Second)
		before := q.Available()
		p := retrypolicy.New(retrypolicy.WithQuota(q), retrypolicy.RetryIf(func(error) bool { panic("retryif") }))
		var got any
		func() {
			defer func() { got = recover() }()
			retrypolicy.Do(context.Background(), p, func(context.Context) (int, error) { return 0, errBlip64 })
		}()
		if got != "retryif" {
			t.Errorf("recovered %v", got)
		}
		if q.Available() != before {
			t.Errorf("RetryIf panic: Available %d want %d", q.Available(), before)
		}
		n := 0
		p = retrypolicy.New(retrypolicy.WithQuota(q), retrypolicy.BaseDelay(0))
		func() {
			defer func() { got = recover() }()
			retrypolicy.Do(context.Background(), p, func(context.Context) (int, error) {
				n++
				if n == 2 {
					panic("op")
				}
				return 0, errBlip64
			})
		}()
		if got != "op" || n != 2 {
			t.Errorf("recovered %v n %d", got, n)
		}
		// listener panics
		q = retrypolicy.NewQuota(0, 5, time.Second)
		l := resilience.ListenerFunc(func(resilience.Event) { panic("listener") })
		p = retrypolicy.New(retrypolicy.WithQuota(q), retrypolicy.BaseDelay(0), retrypolicy.WithListener(l))
		func() {
			defer func() { got = recover() }()
			got = nil
			_, err := retrypolicy.Do(context.Background(), p, failOnce64())
			if err != nil {
				t.Errorf("listener panic failed the call: %v", err)
			}
		}()
		if got != nil {
			t.Logf("a panicking listener panicked the call: %v", got)
		}
	})
}

// Retry-After hints: huge, negative, past the deadline.
func TestReview64RetryAfterHints(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var slept []time.Duration
		rec := func(ctx context.Context, d time.Duration) error { slept = append(slept, d); return nil }
		p := retrypolicy.New(retrypolicy.MaxAttempts(2), retrypolicy.MaxDelay(time.Second), retrypolicy.WithSleep(rec))
		for _, hint := range []time.Duration{-time.Hour, math.MinInt64, math.MaxInt64, 5 * time.Second, 500 * time.Millisecond} {
			slept = nil
			retrypolicy.Do(context.Background(), p, func(context.Context) (int, error) {
				return 0, resilience.RetryAfter(errBlip64, hint)
			})
			if len(slept) != 1 || slept[0] < 0 || slept[0] > time.Second {
				t.Errorf("hint %v: slept %v", hint, slept)
			}
			if hint > 0 && hint <= time.Second && slept[0] < hint {
				t.Errorf("hint %v: slept %v, less than the hint", hint, slept)
			}
		}
		// hint past the deadline: no retry, out of time at once, and not charged
		q := retrypolicy.NewQuota(0, 5, time.Second)
		before := q.Available()
		p = retrypolicy.New(retrypolicy.WithQuota(q), retrypolicy.MaxDelay(time.Minute))
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		t0 := time.Now()
		n := 0
		_, err := retrypolicy.Do(ctx, p, func(context.Context) (int, error) {
			n++
			return 0, resilience.RetryAfter(errBlip64, 2*time.Second)
		})
		if n != 1 || !errors.Is(err, retrypolicy.ErrOutOfTime) || time.Since(t0) != 0 || !errors.Is(err, errBlip64) {
			t.Errorf("hint past deadline: n %d err %v after %v", n, err, time.Since(t0))
		}
		if q.Available() != before {
			t.Errorf("charged: %d vs %d", q.Available(), before)
		}
	})
}

// Extreme quota options.
func TestReview64QuotaExtremes(t *testing.T) {
	for _, tc := range []struct {
		name         string
		ratio, floor float64
		window       time.Duration
		panics       bool
	}{
		{"nan ratio", math.NaN(), 1, time.Second, true},
		{"inf floor", 1, math.Inf(1), time.Second, true},
		{"neg", -1, 1, time.Second, true},
		{"negzero", math.Copysign(0, -1), 1, time.Second, false},
		{"huge ratio", math.MaxFloat64, 0, time.Second, false},
		{"huge floor", 0, math.MaxFloat64, time.Second, false},
		{"huge floor long window", 0, math.MaxFloat64, math.MaxInt64, false},
		{"huge both", math.MaxFloat64, math.MaxFloat64, math.MaxInt64, false},
		{"tiny", math.SmallestNonzeroFloat64, math.SmallestNonzeroFloat64, 10 * time.Millisecond, false},
		{"window 9ms", 1, 1, 9 * time.Millisecond, true},
		{"window 10ms", 1, 1, 10 * time.Millisecond, false},
		{"window 11ms", 1, 1, 11 * time.Millisecond, false},
		{"window max", 1, 1, math.MaxInt64, false},
		{"window -1", 1, 1, -1, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var q *retrypolicy.Quota
			func() {
				defer func() {
					if r := recover(); (r != nil) != tc.panics {
						t.Errorf("panic %v, want panic %v", r, tc.panics)
					}
				}()
				q = retrypolicy.NewQuota(tc.ratio, tc.floor, tc.window)
			}()
			if q == nil {
				return
			}
			p := retrypolicy.New(retrypolicy.WithQuota(q), retrypolicy.BaseDelay(0))
			ok := 0
			for range 1000 {
				if _, err := retrypolicy.Do(context.Background(), p, failOnce64()); err == nil {
					ok++
				}
			}
			t.Logf("%s: %d of 1000 retried, Available %d", tc.name, ok, q.Available())
			if tc.floor >= 1e300 && ok != 1000 {
				t.Errorf("an unlimited floor refused retries: %d of 1000", ok)
			}
			if tc.ratio >= 1e300 && ok < 999 {
				t.Errorf("a huge ratio refused retries: %d of 1000", ok)
			}
		})
	}
}
