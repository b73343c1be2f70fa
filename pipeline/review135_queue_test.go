package pipeline

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/hedge"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

var errR135Unavailable = errors.New("503 unavailable")

// A hedged call with MaxExtra 12 (over maxWaitingOutcomes): every hedge
// fails fast with a 503 while the first attempt hangs; the caller hangs
// up. The call must return (no hang), every hedge goroutine must end (the
// bubble would deadlock otherwise), Discard must be called once for each
// of the 12 results not returned, and the breaker counts the call by the
// 503 it got (a failure).
func TestReview135QueueFullHangup(t *testing.T) {
	for _, withRetry := range []bool{false, true} {
		synctest.Test(t, func(t *testing.T) {
			b := breaker.New("r135")
			opts := []Option{
				WithBreaker(b),
				WithHedging(hedge.New(hedge.Delay(10*time.Millisecond), hedge.MaxExtra(12), hedge.MaxShare(1))),
			}
			if withRetry {
				opts = append(opts, WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(3))))
			}
			p := New(opts...)
			// warm the hedge budget
			for range 40 {
				if _, err := Do(context.Background(), p, func(context.Context) (int, error) { return 1, nil }); err != nil {
					t.Fatal(err)
				}
			}
			before := b.Counts()
			var discarded atomic.Int32
			var hedges atomic.Int32
			ctx, cancel := context.WithCancel(context.Background())
			go func() { time.Sleep(500 * time.Millisecond); cancel() }()
			res, err := Do(ctx, p, func(actx context.Context) (int, error) {
				if p.IsHedge(actx) {
					hedges.Add(1)
					return 7, errR135Unavailable
				}
				<-actx.Done()
				return 0, actx.Err()
			}, Discard(func(int) { discarded.Add(1) }))
			synctest.Wait()
			time.Sleep(time.Second)
			synctest.Wait()
			if err == nil {
				t.Fatalf("res %d, want an error", res)
			}
			if got := hedges.Load(); got != 12 {
				t.Errorf("retry=%v hedges %d, want 12", withRetry, got)
			}
			if got := discarded.Load(); got != hedges.Load() {
				t.Errorf("retry=%v Discard called %d times for %d hedges' results", withRetry, got, hedges.Load())
			}
			after := b.Counts()
			if after.TotalFailures-before.TotalFailures != 1 {
				t.Errorf("retry=%v breaker failures +%d, want +1 (the 503 answers); err %v", withRetry, after.TotalFailures-before.TotalFailures, err)
			}
		})
	}
}
