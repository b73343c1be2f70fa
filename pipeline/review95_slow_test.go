package pipeline_test

import (
	"context"
	"testing"
	"time"

	"github.com/resiliencekit/resiliencekit/hedge"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/resilience"
)

// A slow listener of hedges: the call whose first attempt answers soon
// after the hedge is sent returns then, not after the listener.
func TestReview95SlowHedgeListener(t *testing.T) {
	l := resilience.ListenerFunc(func(e resilience.Event) {
		if e.Kind == resilience.EventHedged {
			time.Sleep(500 * time.Millisecond)
		}
	})
	p := pipeline.New(pipeline.WithName("sh95"), pipeline.WithListener(l),
		pipeline.WithHedging(hedge.New(hedge.Delay(5*time.Millisecond), hedge.MaxShare(1))))
	start := time.Now()
	_, err := pipeline.Do(context.Background(), p, func(ctx context.Context) (int, error) {
		select {
		case <-time.After(30 * time.Millisecond):
			return 1, nil
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	})
	took := time.Since(start)
	t.Logf("err %v after %v", err, took)
	if took > 200*time.Millisecond {
		t.Errorf("the call waited %v for a slow hedge listener", took)
	}
	time.Sleep(600 * time.Millisecond)
}
