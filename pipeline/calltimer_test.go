package pipeline_test

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/resilience"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

// sampler is a CallTimer that has the calls timed while time is set, and
// keeps the ends of calls it hears.
type sampler struct {
	mu   sync.Mutex
	time bool
	ends []resilience.Event
}

func (*sampler) Wants(k resilience.EventKind) bool { return k == resilience.EventCallDone }

func (s *sampler) TimeCall() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.time
}

func (s *sampler) OnEvent(e resilience.Event) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ends = append(s.ends, e)
}

// A CallTimer hears of the end of every call, timed only when it asked,
// through every shape of pipeline: with a breaker (which a call not timed
// could otherwise go straight into), with a retry, with a tracer.
func TestACallTimerHearsEveryCallTimedWhenItAsks(t *testing.T) {
	for name, opts := range map[string][]pipeline.Option{
		"bare":    nil,
		"breaker": {pipeline.WithBreaker(breaker.New("dep")), pipeline.WithRetry(retrypolicy.New())},
		"budget":  {pipeline.WithTimeBudget(time.Hour), pipeline.WithRetry(retrypolicy.New())},
		"traced":  {pipeline.WithTracer(nopTracer{})},
	} {
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s := &sampler{}
				p := pipeline.New(append(opts, pipeline.WithName("dep"), pipeline.WithListener(s))...)
				op := func(context.Context) (int, error) { time.Sleep(time.Second); return 1, nil }
				_, err := pipeline.Do(t.Context(), p, op)
				require.NoError(t, err)
				s.time = true
				_, err = pipeline.Do(t.Context(), p, op)
				require.NoError(t, err)
				assert.Equal(t, []resilience.Event{
					{Kind: resilience.EventCallDone, Name: "dep", Untimed: true},
					{Kind: resilience.EventCallDone, Name: "dep", Duration: time.Second},
				}, s.ends)
			})
		})
	}
}

// Another listener that wants the end of a call has it timed for the
// CallTimer too.
func TestAnotherListenerTimesTheCallForACallTimer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, rec := &sampler{}, &recorder{}
		p := pipeline.New(pipeline.WithName("dep"), pipeline.WithListener(s), pipeline.WithListener(rec))
		_, err := pipeline.Do(t.Context(), p, func(context.Context) (int, error) { time.Sleep(time.Second); return 1, nil })
		require.NoError(t, err)
		assert.Equal(t, []resilience.Event{{Kind: resilience.EventCallDone, Name: "dep", Duration: time.Second}}, s.ends)
		assert.Equal(t, []string{"dep attempt 1 ok=true", "dep call_done 1s ok=true"}, rec.take())
	})
}

// nopTracer starts no span.
type nopTracer struct{}
type nopCall struct{}

func (nopTracer) StartCall(ctx context.Context, _ string) (context.Context, resilience.CallTrace) {
	return ctx, nopCall{}
}
func (nopCall) End(error) {}
func (nopCall) StartAttempt(ctx context.Context, _ resilience.AttemptInfo) (context.Context, func(error)) {
	return ctx, func(error) {}
}
