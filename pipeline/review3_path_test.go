package pipeline

import (
	"context"
	"testing"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/resilience"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

// A listener must not change the path a call takes. With WaitWhenOpen and
// no call waiting as it starts, a call stays out of the pacer's limit to
// the end (noGate: "a call that comes then stays out of it to the end"),
// its stage chosen once, before the retry stage. With a listener that wants
// attempts, call.told picks the stage again for every attempt: once a
// backlog has formed meanwhile, its later attempts go through the gates,
// taking a slot of the pacer's limit (in which the backlog's attempts
// queue) and the breaker's re-check.
func TestReview3ListenerChangesPath(t *testing.T) {
	run := func(withListener bool) (inFlight int) {
		opts := []Option{
			WithBreaker(breaker.New("r3-path")), WaitWhenOpen(),
			WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(2), retrypolicy.BaseDelay(0))),
		}
		if withListener {
			opts = append(opts, WithListener(resilience.ListenerFunc(func(resilience.Event) {})))
		}
		p := New(opts...)
		n := 0
		_, _ = Do(context.Background(), p, func(context.Context) (int, error) {
			n++
			if n == 1 {
				p.cfg.pacer.backlog.Add(1) // a call that waited for the breaker is now under way
				return 0, r3Transient
			}
			inFlight = p.cfg.pacer.limit.InFlight()
			return 1, nil
		})
		p.cfg.pacer.backlog.Add(-1)
		if n != 2 {
			t.Fatalf("ran %d attempts", n)
		}
		return inFlight
	}
	without, with := run(false), run(true)
	if without != with {
		t.Errorf("the pacer's limit held %d attempts in flight during the retry without a listener, %d with one", without, with)
	}
}
