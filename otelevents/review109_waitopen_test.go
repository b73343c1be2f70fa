package otelevents_test

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

// resilience.rejections counts "calls a breaker rejected": a call that
// waits for the breaker (WaitWhenOpen) and is rejected again as it is
// woken is one call, and must not count more than once.
func TestReview109WaitOpenRejectionsPerCall(t *testing.T) {
	for _, xs := range []time.Duration{time.Microsecond, time.Millisecond, 3 * time.Millisecond, 11 * time.Millisecond, 37 * time.Millisecond} {
		t.Run(xs.String(), func(t *testing.T) { r109WaitOpen(t, xs) })
	}
}

func r109WaitOpen(t *testing.T, xs time.Duration) {
	synctest.Test(t, func(t *testing.T) {
		l, rd := r109New(t)
		b := breaker.New("b", breaker.ConsecutiveFailures(1), breaker.OpenTimeout(100*time.Millisecond), breaker.HalfOpenRequests(1))
		w := pipeline.New(pipeline.WithName("w"), pipeline.WithBreaker(b), pipeline.WaitWhenOpen(),
			pipeline.WithTimeBudget(10*time.Second),
			pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(3), retrypolicy.BaseDelay(10*time.Millisecond))),
			pipeline.WithListener(l))
		x := pipeline.New(pipeline.WithName("x"), pipeline.WithBreaker(b), pipeline.WithListener(l))
		var fails atomic.Int64
		fails.Store(4)
		op := func(ctx context.Context) (int, error) {
			time.Sleep(20 * time.Millisecond)
			if fails.Add(-1) >= 0 {
				return 0, errors.New("down")
			}
			return 1, nil
		}
		_, _ = pipeline.Do(context.Background(), x, op) // opens it
		const n = 10
		var wg sync.WaitGroup
		var wOK, wRejected atomic.Int64
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				time.Sleep(time.Duration(i) * 7 * time.Millisecond)
				_, err := pipeline.Do(context.Background(), w, op)
				if err == nil {
					wOK.Add(1)
				} else if errors.Is(err, breaker.ErrOpen) || errors.Is(err, breaker.ErrTooManyRequests) {
					wRejected.Add(1)
				}
			}()
		}
		// x hammers the breaker meanwhile, taking probes from the waiters.
		stop := make(chan struct{})
		var xwg sync.WaitGroup
		xwg.Add(1)
		go func() {
			defer xwg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				_, _ = pipeline.Do(context.Background(), x, op)
				time.Sleep(xs)
				if xs == 0 {
					runtime.Gosched()
				}
			}
		}()
		wg.Wait()
		close(stop)
		xwg.Wait()
		s := r109Sums(t, rd)
		t.Logf("w: %d ok, %d rejected; %s", wOK.Load(), wRejected.Load(), r109Fmt(s))
		if got := s["resilience.rejections"]["w|"]; got > n {
			t.Errorf("resilience.rejections{w} = %d for %d calls through w", got, n)
		}
		if got := r109Total(s["resilience.calls"]) - r109Total(map[string]int64{"x": 0}); s["resilience.calls"] != nil {
			_ = got
		}
		var wcalls int64
		for k, v := range s["resilience.calls"] {
			if len(k) > 1 && k[:2] == "w|" {
				wcalls += v
			}
		}
		if wcalls != n {
			t.Errorf("resilience.calls{w} = %d, want %d", wcalls, n)
		}
	})
}
