package breaker_test

import (
	"context"
	"errors"
	"os"
	"testing"
	"testing/synctest"
	"time"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/resilience"
)

type codeErr struct{ code int }

func (e *codeErr) Error() string { return "code" }

// A FailIf that panics on an error it did not expect (a type assertion,
// say) while a half-open probe's outcome is judged: executeOn has set
// returned before it calls outcome, so the deferred done does not run and
// the probe's slot is never given back: the breaker stays half-open and
// rejects every call with ErrTooManyRequests, for ever. With gobreaker
// (the previous revision judged the outcome inside gobreaker's Execute),
// the panic counted as a failure.
func TestReviewPanickingFailIfLeaksProbeSlot(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := breaker.New("x", breaker.ConsecutiveFailures(1), breaker.OpenTimeout(time.Second),
			breaker.FailIf(func(err error) bool { return err.(*codeErr).code >= 500 }))
		_ = b.Execute(context.Background(), func(context.Context) error { return &codeErr{503} })
		if b.State() != resilience.StateOpen {
			t.Fatalf("state %v", b.State())
		}
		time.Sleep(2 * time.Second)
		func() {
			defer func() { t.Logf("probe: recovered %v", recover()) }()
			_ = b.Execute(context.Background(), func(context.Context) error { return errors.New("not a codeErr") })
		}()
		time.Sleep(time.Hour)
		err := b.Execute(context.Background(), func(context.Context) error { return nil })
		t.Logf("an hour later: state %v, counts %+v, call: %v", b.State(), b.Counts(), err)
		if errors.Is(err, breaker.ErrTooManyRequests) {
			t.Errorf("the breaker is stuck half-open: the panicking probe's slot was never given back")
		}
	})
}

// The same with the default classification: an operation that returns a
// typed nil pointer as its error (the nil-interface mistake), here a nil
// *os.PathError, whose Unwrap dereferences it: Classify panics, and the
// half-open probe's slot is never given back.
func TestReviewTypedNilErrorLeaksProbeSlot(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := breaker.New("x", breaker.ConsecutiveFailures(1), breaker.OpenTimeout(time.Second))
		_ = b.Execute(context.Background(), func(context.Context) error { return errBoom })
		time.Sleep(2 * time.Second)
		func() {
			defer func() { t.Logf("probe: recovered %v", recover()) }()
			_ = b.Execute(context.Background(), func(context.Context) error {
				var pe *os.PathError
				return pe
			})
		}()
		time.Sleep(time.Hour)
		err := b.Execute(context.Background(), func(context.Context) error { return nil })
		t.Logf("an hour later: state %v, counts %+v, call: %v", b.State(), b.Counts(), err)
		if errors.Is(err, breaker.ErrTooManyRequests) {
			t.Errorf("the breaker is stuck half-open: the panicking probe's slot was never given back")
		}
	})
}
