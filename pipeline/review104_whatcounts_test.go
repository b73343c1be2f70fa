package pipeline_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/resilience"
	"github.com/resiliencekit/resiliencekit/throttle"
)

type r104IOTimeout struct{}

func (r104IOTimeout) Error() string   { return "i/o timeout" }
func (r104IOTimeout) Timeout() bool   { return true }
func (r104IOTimeout) Temporary() bool { return true }

// The caller's own errors (a 400), its cancellations and its own short
// deadlines (also when the client answers "i/o timeout" first) must never
// count against the dependency: with those alone beside a few failures,
// the throttle refuses nothing.
func TestReview104CallersOwnOutcomesDoNotCount(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		th := throttle.New(throttle.Window(time.Second))
		p := pipeline.New(pipeline.WithThrottle(th))
		throttled := 0
		for i := range 5000 {
			var err error
			switch i % 5 {
			case 0: // a 400
				_, err = pipeline.Do(context.Background(), p, func(ctx context.Context) (int, error) {
					return 0, resilience.Permanent(errors.New("400 bad request"))
				})
			case 1: // the caller cancels
				ctx, cancel := context.WithCancel(context.Background())
				_, err = pipeline.Do(ctx, p, func(ctx context.Context) (int, error) {
					cancel()
					return 0, ctx.Err()
				})
			case 2: // the caller's short deadline, a socket's timeout first
				ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
				_, err = pipeline.Do(ctx, p, func(ctx context.Context) (int, error) {
					dl, _ := ctx.Deadline()
					time.Sleep(time.Until(dl))
					return 0, r104IOTimeout{}
				})
				cancel()
			case 3: // a real failure of the dependency, one call in 5
				_, err = pipeline.Do(context.Background(), p, func(ctx context.Context) (int, error) {
					return 0, errR104Unavailable
				})
			case 4:
				_, err = pipeline.Do(context.Background(), p, func(ctx context.Context) (int, error) { return 1, nil })
			}
			if errors.Is(err, throttle.ErrThrottled) {
				throttled++
			}
			time.Sleep(time.Millisecond)
		}
		if throttled > 0 {
			t.Errorf("%d of 5000 calls throttled: the dependency failed only 1 in 3 of the attempts it answered (the rest the caller's doing)", throttled)
		}
	})
}
