package pipeline_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/hedge"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/resilience"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

// A dependency whose answers took up to 1.2 s fails every call, with a
// 503 after 800 ms. Callers have 1 s. Without hedging each call counts
// (the 503 came before the deadline); with hedging (500 ms) the 503 of
// the first attempt is replaced by the hedge's deadline error, and the
// call is taken for one its short budget ended.
func TestReview133HedgedDeadlineLosesFailure(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts []pipeline.Option
	}{
		{"retry", []pipeline.Option{pipeline.WithRetry(retrypolicy.New())}},
		{"none", nil},
		{"hedge", []pipeline.Option{pipeline.WithHedging(hedge.New(hedge.Delay(500*time.Millisecond), hedge.MaxShare(1)))}},
		{"retry+hedge", []pipeline.Option{pipeline.WithRetry(retrypolicy.New()), pipeline.WithHedging(hedge.New(hedge.Delay(500*time.Millisecond), hedge.MaxShare(1)))}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				b := breaker.New("dep", breaker.ConsecutiveFailures(3))
				p := pipeline.New(append(tc.opts, pipeline.WithBreaker(b))...)
				var down atomic.Bool
				op := func(ctx context.Context) (int, error) {
					d := 1200 * time.Millisecond
					if down.Load() {
						d = 800 * time.Millisecond
					}
					select {
					case <-time.After(d):
					case <-ctx.Done():
						return 0, ctx.Err()
					}
					if down.Load() {
						return 0, errors.New("503 service unavailable")
					}
					return 1, nil
				}
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				if _, err := pipeline.Do(ctx, p, op); err != nil {
					t.Fatal(err)
				}
				cancel()
				down.Store(true)
				for range 5 {
					ctx, cancel := context.WithTimeout(context.Background(), time.Second)
					_, err := pipeline.Do(ctx, p, op)
					cancel()
					t.Logf("%v: %v %+v", err, b.State(), b.Counts())
				}
				synctest.Wait()
				if b.State() != resilience.StateOpen {
					t.Errorf("5 calls failed by the dependency (503) before their deadline: breaker %v, %+v", b.State(), b.Counts())
				}
			})
		})
	}
}
