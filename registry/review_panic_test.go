package registry_test

import (
	"context"
	"runtime"
	"testing"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/registry"
)

// A call whose operation panics or calls runtime.Goexit is a call, and a
// failure for the registry's figures (the call failed), though its breaker
// counts it neither way (the caller's bug says nothing of the dependency):
// a pipeline whose every call panics shows its traffic and its failures.
func TestPanickedCallsNotCounted(t *testing.T) {
	b := breaker.New("edges27-panic", breaker.ConsecutiveFailures(100))
	r := registry.New()
	p, _ := r.AddPipeline(pipeline.New(pipeline.WithBreaker(b)))
	func() {
		defer func() { recover() }()
		pipeline.Do(context.Background(), p, func(context.Context) (int, error) { panic("x") })
	}()
	done := make(chan struct{})
	go func() {
		defer close(done)
		pipeline.Do(context.Background(), p, func(context.Context) (int, error) { runtime.Goexit(); return 0, nil })
	}()
	<-done
	ps := state27(t, r, p, "edges27-panic")
	if ps.Calls != 2 || ps.Failures != 2 {
		t.Errorf("2 calls, panic and Goexit: breaker counts %d failures; registry Calls=%d Attempts=%d Failures=%d",
			b.Counts().TotalFailures, ps.Calls, ps.Attempts, ps.Failures)
	}
}
