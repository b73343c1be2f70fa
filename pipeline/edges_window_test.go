package pipeline

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/resiliencekit/resiliencekit/hedge"
	"github.com/resiliencekit/resiliencekit/resilience"
)

type slowEndTracer struct{}
type slowEndCall struct{}

func (slowEndTracer) StartCall(ctx context.Context, _ string) (context.Context, resilience.CallTrace) {
	return ctx, slowEndCall{}
}
func (slowEndCall) End(error) {}
func (slowEndCall) StartAttempt(ctx context.Context, a resilience.AttemptInfo) (context.Context, func(error)) {
	return ctx, func(error) {
		if !a.Hedge {
			time.Sleep(50 * time.Millisecond) // an exporter that takes its time, a contended lock
		}
	}
}

// The first attempt succeeds at 15 ms; a hedge, sent at 10 ms, answers a
// permanent error (a 4xx) at 20 ms, while the first attempt's stage is
// still ending its span. The hedge's "win" cuts a first attempt that had
// already returned, and the call fails with the hedge's error: the
// success is discarded.
func TestHedgeOverridesFirstSuccess(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := New(WithHedging(hedge.New(hedge.Delay(10*time.Millisecond), hedge.MaxShare(1))), WithTracer(slowEndTracer{}))
		bad := resilience.Permanent(errors.New("409 conflict"))
		res, err := Do(context.Background(), p, func(ctx context.Context) (string, error) {
			if p.IsHedge(ctx) {
				time.Sleep(10 * time.Millisecond)
				return "", bad
			}
			time.Sleep(15 * time.Millisecond)
			return "first: success", nil
		})
		if err != nil {
			t.Errorf("got %q, %v; the first attempt succeeded at 15 ms, before the hedge answered at 20 ms", res, err)
		}
	})
}
