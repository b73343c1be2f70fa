package pipeline_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/resiliencekit/resiliencekit/hedge"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/resilience"
)

var err400 = resilience.Permanent(errors.New("400 bad request"))

// A hedge that finds its race decided (a hedge failed with an error not
// retried) returns context.Canceled: that is no answer of the dependency,
// and must never be the call's error while the caller is still there.
func TestReview141DecidedHedgeCanceledIsNoAnswer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const d = 10 * time.Millisecond
		p := pipeline.New(pipeline.WithHedging(hedge.New(hedge.Delay(d), hedge.MaxExtra(2), hedge.MaxShare(1))))
		bad, runs := 0, 0
		for i := 0; i < 3000; i++ {
			var n atomic.Int32
			_, err := pipeline.Do(context.Background(), p, func(ctx context.Context) (int, error) {
				switch n.Add(1) {
				case 1: // the first attempt: slow, a 503
					select {
					case <-time.After(100 * time.Millisecond):
					case <-ctx.Done():
					}
					return 0, errors.New("503")
				case 2: // the first hedge: a 400 as the second hedge is due
					time.Sleep(d)
					return 0, err400
				}
				return 0, errors.New("503 again")
			})
			runs++
			if errors.Is(err, context.Canceled) {
				bad++
				if bad == 1 {
					t.Logf("call %d: err=%v (attempts %d)", i, err, n.Load())
				}
			}
		}
		if bad > 0 {
			t.Errorf("%d of %d calls failed with context.Canceled, caller still there", bad, runs)
		}
	})
}

// WithHedging: "none is sent once ... an attempt failed with an error
// that is not retried". A hedge whose EventHedged a slow listener holds
// while another attempt fails with a 400 is still sent.
func TestReview141HedgeAfterDecidedSlowListener(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const d = 10 * time.Millisecond
		var decidedAt atomic.Int64
		var mu sync.Mutex
		var sentAfter []time.Duration
		start := time.Now()
		l := resilience.ListenerFunc(func(e resilience.Event) {
			if e.Kind == resilience.EventHedged && e.Attempt == 3 {
				time.Sleep(20 * time.Millisecond) // slow listener
			}
		})
		p := pipeline.New(pipeline.WithListener(l), pipeline.WithHedging(hedge.New(hedge.Delay(d), hedge.MaxExtra(2), hedge.MaxShare(1))))
		var n atomic.Int32
		_, err := pipeline.Do(context.Background(), p, func(ctx context.Context) (int, error) {
			switch n.Add(1) {
			case 1:
				select {
				case <-time.After(100 * time.Millisecond):
				case <-ctx.Done():
				}
				return 0, errors.New("503")
			case 2:
				time.Sleep(d + 5*time.Millisecond) // returns at 25 ms
				decidedAt.Store(int64(time.Since(start)))
				return 0, err400
			}
			mu.Lock()
			if at := decidedAt.Load(); at != 0 {
				sentAfter = append(sentAfter, time.Since(start)-time.Duration(at))
			}
			mu.Unlock()
			return 0, errors.New("503 again")
		})
		time.Sleep(time.Second)
		t.Logf("err=%v attempts=%d", err, n.Load())
		if len(sentAfter) > 0 {
			t.Errorf("a hedge was sent %v after an attempt failed with an error not retried", sentAfter)
		}
	})
}

// The same in real time, where the timers' jitter varies the order.
func TestReview141DecidedHedgeCanceledRealTime(t *testing.T) {
	const d = 2 * time.Millisecond
	p := pipeline.New(pipeline.WithHedging(hedge.New(hedge.Delay(d), hedge.MaxExtra(3), hedge.MaxShare(1))))
	bad, runs := 0, 0
	deadline := time.Now().Add(3 * time.Second)
	for i := 0; time.Now().Before(deadline); i++ {
		var n atomic.Int32
		jitter := time.Duration(i%7) * 150 * time.Microsecond
		_, err := pipeline.Do(context.Background(), p, func(ctx context.Context) (int, error) {
			switch n.Add(1) {
			case 1:
				select {
				case <-time.After(12 * time.Millisecond):
				case <-ctx.Done():
				}
				return 0, errors.New("503")
			case 2:
				time.Sleep(d - 500*time.Microsecond + jitter)
				return 0, err400
			}
			return 0, errors.New("503 again")
		})
		runs++
		if errors.Is(err, context.Canceled) {
			bad++
			if bad == 1 {
				t.Logf("call %d: err=%v (attempts %d)", i, err, n.Load())
			}
		}
	}
	if bad > 0 {
		t.Errorf("%d of %d calls failed with context.Canceled, caller still there", bad, runs)
	}
}
