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
// failure: its breaker counts it so, the registry does not count it at all
// (no attempt is counted on the way out), so a pipeline whose every call
// panics shows no traffic next to a breaker full of failures.
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
	ps := state27(t, r, "edges27-panic")
	if ps.Calls != 2 || ps.Failures != 2 {
		t.Errorf("2 calls, panic and Goexit: breaker counts %d failures; registry Calls=%d Attempts=%d Failures=%d",
			b.Counts().TotalFailures, ps.Calls, ps.Attempts, ps.Failures)
	}
}
