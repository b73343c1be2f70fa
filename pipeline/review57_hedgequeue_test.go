package pipeline_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/resiliencekit/resiliencekit/hedge"
	"github.com/resiliencekit/resiliencekit/limit"
	"github.com/resiliencekit/resiliencekit/pipeline"
)

// A bulkhead of 1 with a queue of 1. Call A holds the slot for 20 ms; its
// hedge (after 1 ms) takes the only place in the queue. Call B comes at
// 5 ms, with time to spare (100 ms): without hedging it would queue and be
// answered at 40 ms; with it, is it refused at once because a speculative
// hedge holds the queue?
func TestReview57HedgeTakesQueuePlaceOfAFirstAttempt(t *testing.T) {
	for _, hedged := range []bool{false, true} {
		synctest.Test(t, func(t *testing.T) {
			l := limit.NewFixed(1, limit.MaxWaiting(1))
			opts := []pipeline.Option{pipeline.WithLimit(l)}
			if hedged {
				opts = append(opts, pipeline.WithHedging(hedge.New(hedge.Delay(time.Millisecond), hedge.MaxShare(1))))
			}
			p := pipeline.New(opts...)
			op := func(ctx context.Context) (int, error) {
				select {
				case <-time.After(20 * time.Millisecond):
					return 1, nil
				case <-ctx.Done():
					return 0, ctx.Err()
				}
			}
			aDone := make(chan struct{})
			go func() { defer close(aDone); _, _ = pipeline.Do(context.Background(), p, op) }()
			time.Sleep(5 * time.Millisecond)
			ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
			defer cancel()
			_, err := pipeline.Do(ctx, p, op)
			t.Logf("hedged=%v: call B: %v", hedged, err)
			if err != nil {
				if errors.Is(err, limit.ErrLimited) {
					t.Errorf("hedged=%v: call B, with 100 ms to spare, refused at once: a hedge of call A held the queue's only place", hedged)
				} else {
					t.Errorf("hedged=%v: %v", hedged, err)
				}
			}
			<-aDone
		})
	}
}
