package pipeline

import (
	"context"
	"testing"
	"time"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/resilience"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

// A call with WaitWhenOpen whose retries the breaker stopped waits, then
// goes on with the retry stage's attempts (retrypolicy.Resume), numbered
// on (EventRetry.Attempt, the keepers' first/later counts, the
// *retrypolicy.Error's Attempts), and EventAttempt must agree with it:
// an EventRetry after attempt n follows the EventAttempt of attempt n.
func TestReview3WaitWhenOpenAttemptNumbers(t *testing.T) {
	b := breaker.New("r3-wait", breaker.ConsecutiveFailures(1), breaker.OpenTimeout(time.Hour))
	rec := &r3Rec{}
	p := New(
		WithBreaker(b), WaitWhenOpen(),
		WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(3), retrypolicy.BaseDelay(0))),
		WithListener(rec),
	)
	n := 0
	closed := make(chan struct{})
	_, err := Do(context.Background(), p, func(context.Context) (int, error) {
		n++
		switch n {
		case 1: // the breaker opens meanwhile (an operator, or other calls): the retry stage stops
			_ = b.Execute(context.Background(), func(context.Context) error { return r3Transient })
			if b.State() != resilience.StateOpen {
				t.Errorf("breaker %v, want open", b.State())
			}
			go func() { // and an operator closes it
				defer close(closed)
				time.Sleep(50 * time.Millisecond)
				b.SetMode(context.Background(), breaker.ForcedClosed, "r3")
			}()
			return 0, r3Transient
		case 2: // after the wait: the first attempt of the retry stage's second loop
			return 0, r3Transient
		}
		return 1, nil
	})
	if err != nil {
		t.Fatalf("Do: %v", err)
	}
	if n != 3 {
		t.Fatalf("op ran %d times, want 3", n)
	}
	<-closed // SetMode tells rec of the change after it woke the call
	rec.mu.Lock()
	events := rec.events
	rec.mu.Unlock()
	var seq []resilience.Event
	for _, e := range events {
		if e.Kind == resilience.EventAttempt || e.Kind == resilience.EventRetry {
			seq = append(seq, e)
		}
	}
	var trace []string
	for _, e := range seq {
		trace = append(trace, e.Kind.String()+"#"+itoa(e.Attempt))
	}
	t.Logf("events: %v", trace)
	for i, e := range seq {
		if e.Kind == resilience.EventRetry {
			if i == 0 || seq[i-1].Kind != resilience.EventAttempt || seq[i-1].Attempt != e.Attempt {
				t.Errorf("EventRetry after attempt %d does not follow EventAttempt #%d: %v", e.Attempt, e.Attempt, trace)
			}
		}
	}
}

func itoa(n int) string {
	if n < 0 {
		return "-" + itoa(-n)
	}
	if n < 10 {
		return string(rune('0' + n))
	}
	return itoa(n/10) + string(rune('0'+n%10))
}
