package pipeline_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/resilience"
)

// panicTracer panics where its field says: in StartCall, StartAttempt, an
// attempt's end, or End.
type panicTracer struct{ in string }

type panicTrace struct{ in string }

func (p panicTracer) StartCall(ctx context.Context, _ string) (context.Context, resilience.CallTrace) {
	if p.in == "StartCall" {
		panic("tracer bug")
	}
	return ctx, panicTrace(p)
}

func (p panicTrace) StartAttempt(ctx context.Context, _ resilience.AttemptInfo) (context.Context, func(error)) {
	if p.in == "StartAttempt" {
		panic("tracer bug")
	}
	return ctx, func(error) {
		if p.in == "end" {
			panic("tracer bug: nil span")
		}
	}
}

func (p panicTrace) End(error) {
	if p.in == "End" {
		panic("tracer bug")
	}
}

// TestReview20ATracerThatPanicsChangesNothing, from a review: a tracer's
// end of an attempt that panicked after the dependency answered made the
// call panic, and the breaker counted the healthy dependency's failure
// (and opened, on one). A tracer is guarded as listeners are.
func TestReview20ATracerThatPanicsChangesNothing(t *testing.T) {
	for _, in := range []string{"StartCall", "StartAttempt", "end", "End"} {
		t.Run(in, func(t *testing.T) {
			b := breaker.New("tp", breaker.ConsecutiveFailures(1))
			p := pipeline.New(pipeline.WithBreaker(b), pipeline.WithTracer(panicTracer{in}))
			for range 3 {
				v, err := pipeline.Do(context.Background(), p, func(context.Context) (int, error) { return 1, nil })
				require.NoError(t, err)
				require.Equal(t, 1, v)
			}
			require.Equal(t, resilience.StateClosed, b.State())
			require.Zero(t, b.Counts().TotalFailures)
		})
	}
}
