package registry_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/resiliencekit/resiliencekit/hedge"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/registry"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

// TestReview166FailuresWithHedgeWins: a call whose hedge wins (its first
// attempt canceled, its hedge a success) must not hide another call's
// failure. Calls: one whose every attempt fails (a failure), and one
// whose first attempt is slow and its hedge fast (a success).
func TestReview166FailuresWithHedgeWins(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reg := registry.New()
		p, err := reg.AddPipeline(pipeline.New(pipeline.WithName("r166"),
			pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(2), retrypolicy.BaseDelay(0))),
			pipeline.WithHedging(hedge.New(hedge.Delay(10*time.Millisecond), hedge.MaxExtra(1)))))
		if err != nil {
			t.Fatal(err)
		}
		// call 1: every attempt fails at once
		_, err1 := pipeline.Do(context.Background(), p, func(ctx context.Context) (int, error) {
			return 0, errors.New("503")
		})
		// call 2: the first attempt takes 100 ms, the hedge 1 ms
		var n atomic.Int32
		_, err2 := pipeline.Do(context.Background(), p, func(ctx context.Context) (int, error) {
			d := time.Millisecond
			if n.Add(1) == 1 {
				d = 100 * time.Millisecond
			}
			select {
			case <-time.After(d):
				return 1, nil
			case <-ctx.Done():
				return 0, ctx.Err()
			}
		})
		if err1 == nil || err2 != nil {
			t.Fatalf("err1 %v err2 %v", err1, err2)
		}
		time.Sleep(time.Second)
		var st registry.PipelineState
		for _, s := range reg.Snapshot().Pipelines {
			if s.Name == "r166" {
				st = s
			}
		}
		t.Logf("%+v", st)
		if st.Calls != 2 || st.Successes != 1 || st.Failures != 1 {
			t.Errorf("calls %d successes %d failures %d, want 2 1 1", st.Calls, st.Successes, st.Failures)
		}
	})
}
