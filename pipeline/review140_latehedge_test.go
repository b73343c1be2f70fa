package pipeline_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/resiliencekit/resiliencekit/hedge"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/resilience"
)

// A listener slow to hear EventHedged holds up its own hedge (launch's
// doc), after the hedge was counted in its race's sent: the race returns
// meanwhile, and the hedge's operation is then called, after its call
// returned.
func TestReview140SlowHedgedListenerCallsOpAfterReturn(t *testing.T) {
	for _, firstFails := range []bool{false, true} {
		name := "first succeeds"
		if firstFails {
			name = "first fails, not retried"
		}
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				release := make(chan struct{})
				var hedgedEvents atomic.Int32
				l := resilience.ListenerFunc(func(e resilience.Event) {
					if e.Kind == resilience.EventHedged {
						hedgedEvents.Add(1)
						<-release
					}
				})
				p := pipeline.New(pipeline.WithHedging(hedge.New(hedge.Delay(10*time.Millisecond))), pipeline.WithListener(l))
				var returned atomic.Bool
				var opCalls, lateCalls atomic.Int32
				bad := resilience.Permanent(errors.New("400"))
				_, err := pipeline.Do(context.Background(), p, func(ctx context.Context) (int, error) {
					if opCalls.Add(1) == 1 {
						time.Sleep(30 * time.Millisecond)
						if firstFails {
							return 0, bad
						}
						return 1, nil
					}
					if returned.Load() {
						lateCalls.Add(1)
						t.Logf("late hedge's ctx.Err() = %v", ctx.Err())
					}
					return 2, nil
				})
				returned.Store(true)
				close(release)
				synctest.Wait()
				t.Logf("err %v, Hedged %v, EventHedged %d, op calls %d, after the call returned %d", err, pipeline.Hedged(err), hedgedEvents.Load(), opCalls.Load(), lateCalls.Load())
				if lateCalls.Load() > 0 {
					t.Errorf("a hedge's operation was called after its call returned (%d)", lateCalls.Load())
				}
				if opCalls.Load() > 1 && err != nil && !pipeline.Hedged(err) {
					t.Errorf("a hedge's operation ran, and the call's error does not say Hedged: %v", err)
				}
			})
		})
	}
}
