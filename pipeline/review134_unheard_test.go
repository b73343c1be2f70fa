package pipeline

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/hedge"
	"github.com/resiliencekit/resiliencekit/resilience"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

// lagging134 is a caller's context whose deadline has passed by the clock
// before its timer fires (a busy machine): Deadline says dl, Err and Done
// come lag later.
type lagging134 struct {
	context.Context // its timer: dl + lag
	dl              time.Time
}

func (c lagging134) Deadline() (time.Time, bool) { return c.dl, true }

type ioTimeout134 struct{}

func (ioTimeout134) Error() string   { return "read tcp: i/o timeout" }
func (ioTimeout134) Timeout() bool   { return true }
func (ioTimeout134) Temporary() bool { return true }

// review134: no retry stage. The first attempt's client makes the
// deadline its socket's (i/o timeout as the deadline passes, before the
// context's timer has fired); the hedge got a 503 in time. The race's
// answer is that 503 (result wraps it): the breaker must find it, with or
// without a retry stage, as the commit says.
func TestReview134UnheardDeadlineWithoutRetryStage(t *testing.T) {
	for _, withRetry := range []bool{false, true} {
		synctest.Test(t, func(t *testing.T) {
			b := breaker.New("dep", breaker.ConsecutiveFailures(1))
			opts := []Option{WithBreaker(b), WithHedging(hedge.New(hedge.Delay(10*time.Millisecond), hedge.MaxShare(1)))}
			if withRetry {
				opts = append(opts, WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(3))))
			}
			p := New(opts...)
			op := func(ctx context.Context) (int, error) {
				if p.IsHedge(ctx) {
					return 0, err134Unavailable
				}
				dl, _ := ctx.Deadline()
				time.Sleep(time.Until(dl)) // the socket's deadline
				return 0, ioTimeout134{}
			}
			parent, cancel := context.WithTimeout(t.Context(), 60*time.Millisecond)
			defer cancel()
			ctx := lagging134{parent, time.Now().Add(50 * time.Millisecond)}
			_, err := Do(ctx, p, op)
			var ae interface{ Answer() error }
			if !errors.As(err, &ae) || !errors.Is(ae.Answer(), err134Unavailable) {
				t.Logf("retry %v: no answer in err %v", withRetry, err)
			}
			if b.State() != resilience.StateOpen {
				t.Errorf("retry %v: breaker %v: the hedge's in-time 503 was not counted (err %v)", withRetry, b.State(), err)
			}
		})
	}
}
