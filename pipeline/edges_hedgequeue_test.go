package pipeline

import (
	"context"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/resiliencekit/resiliencekit/hedge"
	"github.com/resiliencekit/resiliencekit/limit"
)

// A hedge that queues for a slot of the concurrency limit behind its own
// first attempt gets the slot the first attempt frees as it returns with
// a success, and is sent, after the race was decided.
func TestHedgeSentAfterFirstSucceeded(t *testing.T) {
	var sentLive, sentAny atomic.Int32
	for range 50 {
		synctest.Test(t, func(t *testing.T) {
			p := New(WithLimit(limit.NewFixed(1, limit.MaxWaiting(5))),
				WithHedging(hedge.New(hedge.Delay(10*time.Millisecond), hedge.MaxShare(1))))
			_, err := Do(context.Background(), p, func(ctx context.Context) (int, error) {
				if p.IsHedge(ctx) {
					sentAny.Add(1)
					if ctx.Err() == nil {
						sentLive.Add(1)
					}
					return 2, nil
				}
				time.Sleep(20 * time.Millisecond)
				return 1, nil
			})
			if err != nil {
				t.Fatal(err)
			}
			time.Sleep(time.Second)
		})
	}
	if sentAny.Load() > 0 {
		t.Errorf("of 50 calls whose first attempt succeeded while their hedge waited for its slot, %d hedges were sent anyway (%d with a live context)", sentAny.Load(), sentLive.Load())
	}
}
