package breaker_test

import (
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/resilience"
)

// forwarder is a listener that forwards to others and says so with a
// Members method (the shape internal/safe and Listen honour); this one's
// Members panics.
type forwarder struct{}

func (forwarder) OnEvent(resilience.Event)       {}
func (forwarder) Members() []resilience.Listener { panic("members") }

// A state change that admit makes (open -> half-open) reports under the
// core's lock, which admit takes without defer: a panic on the way out of
// the report leaves the lock held, and every later call to the breaker
// blocks for ever. gobreaker (and the core's own State and done) unlock
// with defer.
func TestReviewPanicInStateChangeReportLeavesCoreLocked(t *testing.T) {
	b := breaker.New("x", breaker.ConsecutiveFailures(1), breaker.OpenTimeout(time.Millisecond))
	stop := b.Listen(forwarder{})
	defer stop()
	func() {
		defer func() { t.Logf("trip: recovered %v", recover()) }()
		_ = b.Execute(context.Background(), func(context.Context) error { return errBoom })
	}()
	time.Sleep(5 * time.Millisecond)
	func() {
		defer func() { t.Logf("half-open: recovered %v", recover()) }()
		_ = b.Execute(context.Background(), func(context.Context) error { return nil })
	}()
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = b.State()
	}()
	select {
	case <-done:
	case <-time.After(2 * time.Second):
		t.Fatal("b.State() blocked: the core's mutex was left locked by a panic in admit")
	}
}

// Likewise with runtime.Goexit in a listener's OnEvent (a test listener's
// t.FailNow): deliver's recover does not stop a Goexit.
func TestReviewGoexitInListenerLeavesCoreLocked(t *testing.T) {
	armed := make(chan struct{}, 1)
	l := resilience.ListenerFunc(func(e resilience.Event) {
		if e.Kind == resilience.EventStateChange && e.To == resilience.StateHalfOpen {
			select {
			case <-armed:
				runtime.Goexit()
			default:
			}
		}
	})
	b := breaker.New("x", breaker.ConsecutiveFailures(1), breaker.OpenTimeout(time.Millisecond), breaker.WithListener(l))
	_ = b.Execute(context.Background(), func(context.Context) error { return errBoom })
	time.Sleep(5 * time.Millisecond)
	armed <- struct{}{}
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		_ = b.Execute(context.Background(), func(context.Context) error { return nil })
	}()
	<-ended
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = b.State()
	}()
	select {
	case <-done:
	case <-time.After(2 * time.Second):
		t.Fatal("b.State() blocked: the core's mutex was left locked by a Goexit in a listener during admit")
	}
}
