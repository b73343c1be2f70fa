package retrypolicy_test

import (
	"context"
	"errors"
	"testing"

	"github.com/resiliencekit/resiliencekit/resilience"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

type r137Rec struct{ events []resilience.Event }

func (r *r137Rec) OnEvent(e resilience.Event) { r.events = append(r.events, e) }

// WithListener "reports each attempt": an attempt that was made (the
// operation ran and returned) must be reported even if RetryIf, asked
// about its error, panics. The retry decision is now asked before the
// attempt is told.
func TestReview137RetryIfPanicHidesAttempt(t *testing.T) {
	rec := &r137Rec{}
	p := retrypolicy.New(retrypolicy.WithListener(rec), retrypolicy.RetryIf(func(err error) bool { panic("caller's bug") }))
	ran := 0
	func() {
		defer func() { recover() }()
		retrypolicy.Do(context.Background(), p, func(ctx context.Context) (int, error) {
			ran++
			return 0, errors.New("503")
		})
	}()
	attempts := 0
	for _, e := range rec.events {
		if e.Kind == resilience.EventAttempt {
			attempts++
		}
	}
	if ran != 1 || attempts != ran {
		t.Errorf("the operation ran %d times, the listener heard %d EventAttempt", ran, attempts)
	}
}
