package pipeline

import (
	"context"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/resiliencekit/resiliencekit/hedge"
	"github.com/resiliencekit/resiliencekit/resilience"
)

// (1) Nothing is sent after the race is decided: a first attempt that
// fails with an error not retried, while hedge 1 is out, stops hedges 2
// and 3 (MaxExtra 3), and the call waits for hedge 1 only if it may win.
func TestReview156NoHedgeAfterDecided(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := New(WithHedging(hedge.New(hedge.Delay(100*time.Millisecond), hedge.MaxExtra(3), hedge.MaxShare(1))))
		var n atomic.Int32
		var d r156Discards
		_, err := Do(t.Context(), p, func(ctx context.Context) (int, error) {
			if n.Add(1) == 1 {
				time.Sleep(150 * time.Millisecond)
				return 1, resilience.Permanent(r156Fail)
			}
			select {
			case <-ctx.Done():
				return 2, ctx.Err()
			case <-time.After(time.Second):
				return 2, nil
			}
		}, Discard(d.fn))
		if err == nil || !resilience.IsPermanent(err) {
			t.Errorf("err %v, want the first attempt's permanent failure", err)
		}
		time.Sleep(2 * time.Second)
		synctest.Wait()
		if n.Load() != 2 {
			t.Errorf("%d attempts, want 2: no hedge after the race was decided", n.Load())
		}
		if got := d.get(); got[2] != 1 || len(got) != 1 {
			t.Errorf("discards %v, want hedge 1's result once", got)
		}
	})
}

// (b) for DoStream: the budget ends while a stubborn hedge is out after
// the first attempt failed; its late success is discarded once, and the
// call returns at the budget's end.
func TestReview156StreamBudgetEndsStubbornHedge(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := New(WithHedging(hedge.New(hedge.Delay(100*time.Millisecond))), WithTimeBudget(300*time.Millisecond))
		var n atomic.Int32
		var d r156Discards
		start := time.Now()
		res, release, err := DoStream(t.Context(), p, func(ctx context.Context) (int, error) {
			if n.Add(1) == 1 {
				time.Sleep(150 * time.Millisecond)
				return 1, r156Fail
			}
			time.Sleep(time.Second)
			return 2, nil
		}, Discard(d.fn))
		if release != nil {
			release()
		}
		if err == nil || res == 2 || time.Since(start) != 300*time.Millisecond {
			t.Errorf("got %d, %v after %v; want a failure at 300ms", res, err, time.Since(start))
		}
		time.Sleep(2 * time.Second)
		synctest.Wait()
		if got := d.get(); got[2] != 1 || len(got) != 1 {
			t.Errorf("discards %v, want the late success 2 once", got)
		}
		// and the next stream call is served, hedged.
		var m atomic.Int32
		start = time.Now()
		res, release, err = DoStream(t.Context(), p, func(ctx context.Context) (int, error) {
			if m.Add(1) == 1 {
				<-ctx.Done()
				return -1, ctx.Err()
			}
			time.Sleep(10 * time.Millisecond)
			return 7, nil
		}, Discard(d.fn))
		if err != nil || res != 7 || time.Since(start) != 110*time.Millisecond {
			t.Errorf("next call: %d, %v after %v", res, err, time.Since(start))
		}
		if release != nil {
			release()
		}
	})
}
