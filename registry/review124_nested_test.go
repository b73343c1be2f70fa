package registry_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/hedge"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/registry"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

// An outer hedged pipeline whose operation calls an inner registered one:
// the inner call of the loser, canceled by the winner, is no failure, and
// does not count against the inner breaker.
func TestR124NestedLoserNoFailure(t *testing.T) {
	for _, innerHedged := range []bool{false, true} {
		synctest.Test(t, func(t *testing.T) {
			r := registry.New()
			ib := breaker.New("inner", breaker.ConsecutiveFailures(1))
			iopts := []pipeline.Option{pipeline.WithName("inner"), pipeline.WithBreaker(ib),
				pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(2), retrypolicy.BaseDelay(time.Millisecond)))}
			if innerHedged {
				iopts = append(iopts, pipeline.WithHedging(hedge.New(hedge.Delay(5*time.Millisecond), hedge.MaxShare(1))))
			}
			inner, err := r.AddPipeline(pipeline.New(iopts...))
			if err != nil {
				t.Fatal(err)
			}
			outer, err := r.AddPipeline(pipeline.New(pipeline.WithName("outer"),
				pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(2))),
				pipeline.WithHedging(hedge.New(hedge.Delay(10*time.Millisecond), hedge.MaxShare(1)))))
			if err != nil {
				t.Fatal(err)
			}
			first := true
			_, err = pipeline.Do(context.Background(), outer, func(ctx context.Context) (int, error) {
				slow := !outer.IsHedge(ctx)
				_ = first
				return pipeline.Do(ctx, inner, func(ctx context.Context) (int, error) {
					if slow {
						select {
						case <-time.After(time.Hour):
							return 1, nil
						case <-ctx.Done():
							return 0, ctx.Err()
						}
					}
					return 2, nil
				})
			})
			if err != nil {
				t.Fatal(err)
			}
			time.Sleep(time.Second)
			synctest.Wait()
			si := r95State(t, r, inner, "inner")
			so := r95State(t, r, outer, "outer")
			t.Logf("innerHedged=%v\ninner %+v\nouter %+v", innerHedged, si, so)
			if si.Calls != 2 || si.Successes != 1 || si.Failures != 0 {
				t.Errorf("inner: Calls %d Successes %d Failures %d", si.Calls, si.Successes, si.Failures)
			}
			if so.Calls != 1 || so.Successes != 1 || so.Failures != 0 {
				t.Errorf("outer: %+v", so)
			}
			if st := ib.Snapshot(); st.State.String() != "closed" {
				t.Errorf("inner breaker %v", st.State)
			}
		})
	}
}
