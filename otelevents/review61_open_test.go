package otelevents_test

import (
	"context"
	"testing"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/registry"
	"github.com/resiliencekit/resiliencekit/resilience"
)

// TestReview61PanicsOpenBreaker: operations that panic no longer open the
// breaker (it counts a panic neither way, as documented), and an on-call
// person still sees the calls and attempts in the metrics.
func TestReview61PanicsOpenBreaker(t *testing.T) {
	l, rd := r61New(t)
	b := breaker.New("dep", breaker.ConsecutiveFailures(5))
	p := pipeline.New(pipeline.WithBreaker(b), pipeline.WithListener(l))
	for range 5 {
		func() {
			defer func() { recover() }()
			_, _ = pipeline.Do(context.Background(), p, func(ctx context.Context) (int, error) { panic("bug") })
		}()
	}
	if b.State() != resilience.StateClosed {
		t.Fatalf("state %v", b.State())
	}
	s := r61Sums(t, rd)
	t.Logf("state gauge %v; calls %v; attempts %v", s["resilience.breaker.state"], s["resilience.calls"], s["resilience.attempts"])
	if r61Total(s["resilience.attempts"]) == 0 {
		t.Errorf("5 attempts that panicked, but resilience.attempts and resilience.calls show none")
	}
}

// TestReview61CanceledBeforeStart: a call whose context is canceled
// before it starts: otel counts it, canceled (documented); the registry
// counts it as a call too. Is it a failure on the dashboard?
func TestReview61CanceledBeforeStart(t *testing.T) {
	l, rd := r61New(t)
	reg := registry.New()
	p, err := reg.AddPipeline(pipeline.New(pipeline.WithBreaker(breaker.New("dep")), pipeline.WithListener(l)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	ran := 0
	for range 10 {
		_, _ = pipeline.Do(ctx, p, func(ctx context.Context) (int, error) { ran++; return 1, nil })
	}
	s := r61Sums(t, rd)
	ps := reg.Snapshot().Pipelines[0]
	t.Logf("ran %d; otel calls %v attempts %v; registry calls=%d attempts=%d succ=%d fail=%d", ran, s["resilience.calls"], s["resilience.attempts"], ps.Calls, ps.Attempts, ps.Successes, ps.Failures)
	if s["resilience.calls"]["dep|canceled"] != 10 {
		t.Errorf("otel canceled calls %v", s["resilience.calls"])
	}
	if ps.Failures != 0 {
		t.Errorf("registry counts %d caller cancellations as failures", ps.Failures)
	}
}
