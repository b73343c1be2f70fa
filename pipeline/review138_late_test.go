package pipeline_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/resiliencekit/resiliencekit/hedge"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/resilience"
)

// r138Tracer blocks the start of a hedge's span until release is closed.
type r138Tracer struct {
	release chan struct{}
	blocked chan struct{}
	once    sync.Once
}

func (t *r138Tracer) StartCall(ctx context.Context, _ string) (context.Context, resilience.CallTrace) {
	return ctx, r138Trace{t}
}

type r138Trace struct{ t *r138Tracer }

func (tr r138Trace) StartAttempt(ctx context.Context, a resilience.AttemptInfo) (context.Context, func(error)) {
	if a.Hedge {
		tr.t.once.Do(func() { close(tr.t.blocked) })
		<-tr.t.release
	}
	return ctx, func(error) {}
}
func (r138Trace) End(error) {}

// A hedge admitted by the gates while its race is undecided, then held up
// starting its span, is sent (its operation called) after its race was
// decided and its call returned: the check that a hedge admitted once the
// race was decided is not sent (call.attempt) comes before the span, not
// after. Its call's error does not say Hedged, though the operation was
// then called a second time, and EventHedged comes after EventCallDone.
func TestReview138HedgeSentAfterItsCallReturned(t *testing.T) {
	for _, firstFails := range []bool{false, true} {
		name := "first succeeds"
		if firstFails {
			name = "first answers not to retry"
		}
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				tr := &r138Tracer{release: make(chan struct{}), blocked: make(chan struct{})}
				var events []resilience.EventKind
				var mu sync.Mutex
				p := pipeline.New(
					pipeline.WithHedging(hedge.New(hedge.Delay(10*time.Millisecond))),
					pipeline.WithTracer(tr),
					pipeline.WithListener(resilience.ListenerFunc(func(e resilience.Event) {
						mu.Lock()
						events = append(events, e.Kind)
						mu.Unlock()
					})),
				)
				var calls, afterReturn atomic.Int32
				var returned atomic.Bool
				permanent := resilience.Permanent(errors.New("400"))
				op := func(ctx context.Context) (int, error) {
					n := calls.Add(1)
					if returned.Load() {
						afterReturn.Add(1)
						t.Logf("late hedge's ctx.Err() = %v", ctx.Err())
					}
					if n == 1 {
						<-tr.blocked // the hedge is past the gates, starting its span
						if firstFails {
							return 0, permanent
						}
						return 1, nil
					}
					return 2, nil
				}
				_, err := pipeline.Do(context.Background(), p, op)
				returned.Store(true)
				close(tr.release)
				synctest.Wait()
				time.Sleep(time.Second)
				synctest.Wait()
				if afterReturn.Load() > 0 {
					t.Errorf("a hedge's operation was called after its call returned (err %v, Hedged %v): %d call(s)",
						err, pipeline.Hedged(err), afterReturn.Load())
				}
				mu.Lock()
				defer mu.Unlock()
				done := -1
				for i, k := range events {
					if k == resilience.EventCallDone {
						done = i
					}
					if k == resilience.EventHedged && done >= 0 {
						t.Errorf("EventHedged told after EventCallDone: %v", events)
					}
				}
				if firstFails && afterReturn.Load() > 0 && !pipeline.Hedged(err) {
					t.Errorf("the call failed, its hedge was then sent, and Hedged(err) is false")
				}
			})
		})
	}
}
