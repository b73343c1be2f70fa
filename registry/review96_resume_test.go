package registry

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/limit"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/resilience"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

// A retry refused by the breaker's re-check (it opened as the retry waited
// for the one slot), then waited out (WaitWhenOpen) and resumed, fails:
// two calls failed, the registry must say two failures.
func TestReview96RefusedRetryResumedThenFails(t *testing.T) {
	for _, resumedOK := range []bool{false, true} {
		reg := New()
		name := "r96resume"
		if resumedOK {
			name += "ok"
		}
		b := breaker.New("b"+name, breaker.ConsecutiveFailures(2), breaker.OpenTimeout(30*time.Millisecond))
		p, err := reg.AddPipeline(pipeline.New(pipeline.WithName(name), pipeline.WithBreaker(b),
			pipeline.WithLimit(limit.NewFixed(1, limit.MaxWaiting(10))),
			pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(4), retrypolicy.BaseDelay(5*time.Millisecond), retrypolicy.MaxDelay(5*time.Millisecond), retrypolicy.Jitter(retrypolicy.None))),
			pipeline.WaitWhenOpen()))
		if err != nil {
			t.Fatal(err)
		}
		st := reg.pipelines[name].stats
		release := make(chan struct{})
		inB := make(chan struct{})
		var wg sync.WaitGroup
		var n atomic.Int32
		var errA, errB error
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errA = pipeline.Do(context.Background(), p, func(ctx context.Context) (int, error) {
				if n.Add(1) == 1 {
					wg.Add(1)
					go func() {
						defer wg.Done()
						_, errB = pipeline.Do(context.Background(), p, func(ctx context.Context) (int, error) {
							close(inB)
							<-release
							return 0, errors.New("B fails")
						}, pipeline.SingleAttempt())
					}()
					time.Sleep(2 * time.Millisecond) // B waits for the slot
					return 0, errors.New("A fails")
				}
				if resumedOK {
					return 1, nil
				}
				return 0, errors.New("A fails again")
			})
		}()
		<-inB
		time.Sleep(30 * time.Millisecond)                             // A's retry waits for the slot
		for i := 0; i < 3 && b.State() != resilience.StateOpen; i++ { // open the breaker from outside the pipeline
			_ = b.Execute(context.Background(), func(context.Context) error { return errors.New("C fails") })
		}
		if b.State() != resilience.StateOpen {
			t.Fatalf("rig: breaker %v", b.State())
		}
		close(release)
		wg.Wait()
		tt := st.totals()
		calls, f, l := st.Load()
		t.Logf("resumedOK=%v errA=%v errB=%v attemptsA=%d", resumedOK, errA, errB, n.Load())
		t.Logf("calls=%d first=%+v later=%+v totals=%+v", calls, f, l, tt)
		wantFail := uint64(2) // A and B (C is outside the pipeline)
		if resumedOK {
			wantFail = 1
		}
		if errA == nil != resumedOK {
			t.Fatalf("rig: errA=%v", errA)
		}
		if tt.Failures != wantFail {
			t.Errorf("resumedOK=%v: registry says %d failures, callers saw %d", resumedOK, tt.Failures, wantFail)
		}
	}
}
