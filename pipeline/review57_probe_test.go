package pipeline_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/limit"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/resilience"
)

// The probe of a half-open breaker is refused by a full limit (shared with
// another pipeline). The refusal is no evidence: once the limit has room,
// the next call must probe, and close the breaker.
func TestReview57ProbeRefusedByLimitDoesNotWedgeBreaker(t *testing.T) {
	for _, wait := range []bool{false, true} {
		synctest.Test(t, func(t *testing.T) {
			l := limit.NewFixed(1)
			b := breaker.New("r57-probe", breaker.ConsecutiveFailures(2), breaker.OpenTimeout(10*time.Millisecond))
			opts := []pipeline.Option{pipeline.WithBreaker(b), pipeline.WithLimit(l)}
			if wait {
				opts = append(opts, pipeline.WaitWhenOpen(), pipeline.WithTimeBudget(50*time.Millisecond))
			}
			p := pipeline.New(opts...)
			other := pipeline.New(pipeline.WithLimit(l))
			for i := 0; i < 2; i++ {
				_, _ = pipeline.Do(context.Background(), p, func(context.Context) (int, error) { return 0, errors.New("503") })
			}
			if b.State() != resilience.StateOpen {
				t.Fatalf("breaker %v", b.State())
			}
			hold := make(chan struct{})
			done := make(chan struct{})
			go func() {
				defer close(done)
				_, _ = pipeline.Do(context.Background(), other, func(context.Context) (int, error) { <-hold; return 1, nil })
			}()
			time.Sleep(20 * time.Millisecond) // half-open now
			_, err := pipeline.Do(context.Background(), p, func(context.Context) (int, error) { return 1, nil })
			t.Logf("wait=%v probe while the limit is full: %v; breaker %v", wait, err, b.State())
			close(hold)
			<-done
			for i := 0; i < 5; i++ {
				_, err = pipeline.Do(context.Background(), p, func(context.Context) (int, error) { return 1, nil })
				if err == nil {
					break
				}
				time.Sleep(20 * time.Millisecond)
			}
			if err != nil || b.State() != resilience.StateClosed {
				t.Errorf("wait=%v: with the limit free again, healthy calls: %v; breaker %v", wait, err, b.State())
			}
		})
	}
}
