package pipeline_test

import (
	"context"
	"runtime"
	"sync/atomic"
	"testing"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/resilience"
)

// r109Timer wants every event, and declines to time calls.
type r109Timer struct{ done, untimed atomic.Int64 }

func (l *r109Timer) Wants(resilience.EventKind) bool { return true }
func (l *r109Timer) TimeCall() bool                  { return false }
func (l *r109Timer) OnEvent(e resilience.Event) {
	if e.Kind == resilience.EventCallDone {
		l.done.Add(1)
		if e.Untimed {
			l.untimed.Add(1)
		}
	}
}

// Listener: EventCallDone is "a pipeline call ended"; Filter: a stage
// skips it only "for a listener that does not want it". A CallTimer that
// wants the end of every call but declines to time it must hear of a call
// whose operation panicked or called runtime.Goexit, as a listener that
// has it timed does.
func TestReview109UntimedPanicCallDone(t *testing.T) {
	for _, how := range []string{"panic", "goexit"} {
		for _, stream := range []bool{false, true} {
			t.Run(how, func(t *testing.T) {
				l := new(r109Timer)
				p := pipeline.New(pipeline.WithBreaker(breaker.New("dep")), pipeline.WithListener(l))
				done := make(chan struct{})
				go func() {
					defer close(done)
					defer func() { _ = recover() }()
					op := func(context.Context) (int, error) {
						if how == "panic" {
							panic("boom")
						}
						runtime.Goexit()
						return 0, nil
					}
					if stream {
						_, release, _ := pipeline.DoStream(context.Background(), p, op)
						release()
					} else {
						_, _ = pipeline.Do(context.Background(), p, op)
					}
				}()
				<-done
				if l.done.Load() != 1 {
					t.Errorf("stream=%v: EventCallDone heard %d times for one call that ended (%s)", stream, l.done.Load(), how)
				}
			})
		}
	}
}
