package pipeline_test

import (
	"context"
	"errors"
	"runtime"
	"testing"
	"time"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/resilience"
)

func r95Go(f func()) (returned bool) {
	ch := make(chan bool)
	go func() {
		ok := false
		defer func() { ch <- ok }()
		f()
		ok = true
	}()
	return <-ch
}

// A listener that calls Goexit as it hears the breaker open (told under
// the breaker's lock): later calls must not hang.
func TestReview95StateChangeListenerGoexit(t *testing.T) {
	l := resilience.ListenerFunc(func(e resilience.Event) {
		if e.Kind == resilience.EventStateChange {
			runtime.Goexit()
		}
	})
	b := breaker.New("sc95", breaker.ConsecutiveFailures(1), breaker.OpenTimeout(20*time.Millisecond))
	p := pipeline.New(pipeline.WithBreaker(b), pipeline.WithListener(l))
	r := r95Go(func() {
		pipeline.Do(context.Background(), p, func(context.Context) (int, error) { return 0, errors.New("down") })
	})
	t.Logf("tripping call returned: %v; state %v", r, b.State())
	done := make(chan struct{})
	go func() {
		defer close(done)
		time.Sleep(30 * time.Millisecond)
		for range 5 {
			r95Go(func() {
				pipeline.Do(context.Background(), p, func(context.Context) (int, error) { return 1, nil })
			})
		}
	}()
	select {
	case <-done:
		t.Logf("later calls returned; state %v", b.State())
	case <-time.After(3 * time.Second):
		t.Fatal("calls hang after a state-change listener called Goexit")
	}
}
