package retrypolicy

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
)

var review86Err = errors.New("review86 transient")

// Many goroutines, every call failing: retries per window of buckets and per
// bucket never exceed the documented allowance; first attempts never refused.
func TestReview86QuotaBoundSynctest(t *testing.T) {
	for _, tc := range []struct {
		ratio, floor float64
		window       time.Duration
	}{{0.1, 10, 10 * time.Second}, {0.2, 0, time.Second}, {1, 0.5, 2 * time.Second}, {0, 3, 10 * time.Second}} {
		synctest.Test(t, func(t *testing.T) {
			q := NewQuota(tc.ratio, tc.floor, tc.window)
			bucket := tc.window / 10
			start := time.Now()
			p := New(WithQuota(q), BaseDelay(0), MaxAttempts(6))
			const nb = 80
			var mu sync.Mutex
			calls := make([]int, nb+20)
			retries := make([]int, nb+20)
			var firsts, callsN atomic.Int64
			var wg sync.WaitGroup
			for g := range 40 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					r := rand.New(rand.NewPCG(uint64(g), 9))
					for time.Since(start) < nb*bucket {
						b := int(time.Since(start) / bucket)
						mu.Lock()
						calls[b]++
						mu.Unlock()
						callsN.Add(1)
						n := 0
						Do(context.Background(), p, func(context.Context) (int, error) {
							n++
							if n == 1 {
								firsts.Add(1)
							} else {
								mu.Lock()
								retries[int(time.Since(start)/bucket)]++
								mu.Unlock()
							}
							return 0, review86Err
						})
						// bursts then lulls
						if g%3 == 0 {
							time.Sleep(time.Duration(r.IntN(int(bucket/5) + 1)))
						} else {
							time.Sleep(time.Duration(r.IntN(int(3*bucket) + 1)))
						}
					}
				}()
			}
			wg.Wait()
			if firsts.Load() != callsN.Load() {
				t.Errorf("first attempts %d != calls %d", firsts.Load(), callsN.Load())
			}
			floorW := tc.floor * tc.window.Seconds()
			total := 0
			for b := range nb {
				cw, rw := 0, 0
				for i := max(0, b-9); i <= b; i++ {
					cw += calls[i]
					rw += retries[i]
				}
				inWindow := math.Floor(tc.ratio*float64(cw) + floorW)
				inBucket := max(math.Floor(inWindow/10), 1)
				if float64(rw) > inWindow {
					t.Errorf("%+v bucket %d: %d retries in window, allowance %v (calls %d)", tc, b, rw, inWindow, cw)
				}
				if float64(retries[b]) > inBucket {
					t.Errorf("%+v bucket %d: %d retries in bucket, allowance %v", tc, b, retries[b], inBucket)
				}
				total += retries[b]
			}
			t.Logf("%+v: calls %d retries %d", tc, callsN.Load(), total)
		})
	}
}

// Calls that do not retry leave Available as it was (or more).
func TestReview86NonRetryingCallsDoNotDrain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := NewQuota(1, 0, 10*time.Second)
		p := New(WithQuota(q), BaseDelay(time.Millisecond), MaxAttempts(3))
		for range 200 {
			Do(context.Background(), p, func(context.Context) (int, error) { return 1, nil })
		}
		before := q.Available()
		if before < 1 {
			t.Fatalf("available %d", before)
		}
		check := func(name string) {
			t.Helper()
			if a := q.Available(); a < before {
				t.Errorf("%s: available %d < %d", name, a, before)
			}
			before = q.Available()
		}
		Do(context.Background(), p, func(context.Context) (int, error) { return 0, resilience.Permanent(review86Err) })
		check("permanent")
		Do(context.Background(), p, func(context.Context) (int, error) { return 0, resilience.Rejected(review86Err) })
		check("rejected")
		Do(context.Background(), p, func(context.Context) (int, error) { return 0, resilience.Terminal(review86Err) })
		check("terminal")
		ctx, cancel := context.WithCancel(context.Background())
		Do(ctx, p, func(context.Context) (int, error) { cancel(); return 0, review86Err })
		check("canceled during attempt")
		ctx, cancel = context.WithCancel(context.Background())
		go func() { time.Sleep(500 * time.Microsecond); cancel() }()
		p2 := p.With(BaseDelay(10*time.Millisecond), Jitter(None))
		Do(ctx, p2, func(context.Context) (int, error) { return 0, review86Err })
		check("canceled during backoff")
		ctx, cancel = context.WithTimeout(context.Background(), 5*time.Millisecond)
		Do(ctx, p2, func(context.Context) (int, error) { return 0, review86Err })
		cancel()
		check("deadline too close")
		errOpen := errors.New("open")
		DoGuarded(context.Background(), p, func() error { return errOpen }, func(context.Context) (int, error) { return 0, review86Err })
		check("guard open before retry")
		DoGuarded(context.Background(), New(WithQuota(q), MaxAttempts(1)), nil, func(context.Context) (int, error) { return 0, review86Err })
		check("max attempts 1")
		p3 := p.With(WithSleep(func(context.Context, time.Duration) error { return errors.New("sleep failed") }))
		Do(context.Background(), p3, func(context.Context) (int, error) { return 0, review86Err })
		check("sleep failed")
		p4 := p.With(WithSleep(func(context.Context, time.Duration) error { panic("sleep panic") }))
		func() {
			defer func() { recover() }()
			Do(context.Background(), p4, func(context.Context) (int, error) { return 0, review86Err })
		}()
		check("sleep panicked")
		done := make(chan struct{})
		p5 := p.With(WithSleep(func(context.Context, time.Duration) error { runtimeGoexit(); return nil }))
		go func() {
			defer close(done)
			Do(context.Background(), p5, func(context.Context) (int, error) { return 0, review86Err })
		}()
		<-done
		check("sleep Goexit")
		// the guard opens during the delay: no retry made
		var n atomic.Int32
		DoGuarded(context.Background(), p, func() error {
			if n.Add(1) >= 2 {
				return errOpen
			}
			return nil
		}, func(context.Context) (int, error) { return 0, review86Err })
		check("guard opened during the delay, not resumed")
	})
}

// Calls whose retry a breaker stopped during its delay (the pipeline
// without WaitWhenOpen never resumes them) give their charges back.
func TestReview86GuardAfterDelayGivesTheChargeBack(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := NewQuota(0.1, 0, 10*time.Second)
		p := New(WithQuota(q), BaseDelay(10*time.Millisecond), Jitter(None), MaxAttempts(3))
		for range 1000 {
			Do(context.Background(), p, func(context.Context) (int, error) { return 1, nil })
		}
		before := q.Available()
		var open atomic.Bool
		errOpen := errors.New("open")
		guard := func() error {
			if open.Load() {
				return errOpen
			}
			return nil
		}
		var wg sync.WaitGroup
		for range 50 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				DoGuarded(context.Background(), p, guard, func(context.Context) (int, error) { return 0, review86Err })
			}()
		}
		time.Sleep(time.Millisecond)
		open.Store(true)
		wg.Wait()
		after := q.Available()
		t.Logf("available before %d, after 50 calls stopped by the guard during their delay with no retry sent: %d", before, after)
		if after < before {
			t.Errorf("drained %d retries not made", before-after)
		}
	})
}

func runtimeGoexit() { runtimeGoexitFn() }
