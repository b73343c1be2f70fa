package otelevents_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/registry"
	"github.com/resiliencekit/resiliencekit/resilience"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

var r61Transient = errors.New("transient 503")

// TestReview61CountsRetries: many goroutines through breaker+retry; each
// attempt fails transiently at random, or is permanent. The breaker never
// opens (high threshold). Ground truth is counted in the operation.
func TestReview61CountsRetries(t *testing.T) {
	l, rd := r61New(t)
	reg := registry.New()
	b := breaker.New("dep", breaker.ConsecutiveFailures(1<<30))
	p, err := reg.AddPipeline(pipeline.New(pipeline.WithBreaker(b),
		pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(3), retrypolicy.BaseDelay(time.Microsecond), retrypolicy.MaxDelay(time.Microsecond))),
		pipeline.WithListener(l)))
	if err != nil {
		t.Fatal(err)
	}
	var attempts, calls, okCalls, failCalls, permCalls atomic.Int64
	var wg sync.WaitGroup
	for g := 0; g < 32; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 500; i++ {
				calls.Add(1)
				_, err := pipeline.Do(context.Background(), p, func(ctx context.Context) (int, error) {
					attempts.Add(1)
					switch r := rand.IntN(10); {
					case r < 5:
						return 0, r61Transient
					case r < 6:
						return 0, resilience.Permanent(errors.New("400"))
					}
					return 1, nil
				})
				switch {
				case err == nil:
					okCalls.Add(1)
				case resilience.Classify(err) == resilience.ClassPermanent:
					permCalls.Add(1)
					failCalls.Add(1)
				default:
					failCalls.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	s := r61Sums(t, rd)
	if got := r61Total(s["resilience.calls"]); got != calls.Load() {
		t.Errorf("otel calls %d, want %d", got, calls.Load())
	}
	if got := s["resilience.calls"]["dep|success"]; got != okCalls.Load() {
		t.Errorf("otel success calls %d, want %d", got, okCalls.Load())
	}
	if got := r61Total(s["resilience.attempts"]); got != attempts.Load() {
		t.Errorf("otel attempts %d, want %d", got, attempts.Load())
	}
	if got := r61Total(s["resilience.retries"]); got != attempts.Load()-calls.Load() {
		t.Errorf("otel retries %d, want %d", got, attempts.Load()-calls.Load())
	}
	if got := r61Total(s["resilience.call.duration"]); got != calls.Load() {
		t.Errorf("otel histogram count %d, want %d", got, calls.Load())
	}
	snap := reg.Snapshot()
	ps := snap.Pipelines[0]
	if ps.Calls != uint64(calls.Load()) || ps.Attempts != uint64(attempts.Load()) || ps.Successes != uint64(okCalls.Load()) || ps.Failures != uint64(failCalls.Load()) || ps.Retries != uint64(attempts.Load()-calls.Load()) {
		t.Errorf("registry calls=%d attempts=%d succ=%d fail=%d retries=%d; want %d %d %d %d %d", ps.Calls, ps.Attempts, ps.Successes, ps.Failures, ps.Retries,
			calls.Load(), attempts.Load(), okCalls.Load(), failCalls.Load(), attempts.Load()-calls.Load())
	}
	t.Logf("calls=%d attempts=%d ok=%d fail=%d giveups=%v", calls.Load(), attempts.Load(), okCalls.Load(), failCalls.Load(), s["resilience.giveups"])
}

type r61Panic struct{}

// TestReview61CountsPanicGoexit: calls whose operation panics or calls
// runtime.Goexit. The registry counts them (as failures); what does otel?
func TestReview61CountsPanicGoexit(t *testing.T) {
	l, rd := r61New(t)
	reg := registry.New()
	b := breaker.New("dep", breaker.ConsecutiveFailures(1<<30))
	p, err := reg.AddPipeline(pipeline.New(pipeline.WithBreaker(b),
		pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(3), retrypolicy.BaseDelay(time.Microsecond), retrypolicy.MaxDelay(time.Microsecond))),
		pipeline.WithListener(l)))
	if err != nil {
		t.Fatal(err)
	}
	var attempts, calls atomic.Int64
	var wg sync.WaitGroup
	for g := 0; g < 16; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 100; i++ {
				kind := i % 3
				calls.Add(1)
				done := make(chan struct{})
				go func() {
					defer close(done)
					defer func() { recover() }()
					_, _ = pipeline.Do(context.Background(), p, func(ctx context.Context) (int, error) {
						n := attempts.Add(1)
						_ = n
						switch kind {
						case 0:
							panic(r61Panic{})
						case 1:
							runtime.Goexit()
						}
						return 1, nil
					})
				}()
				<-done
			}
		}()
	}
	wg.Wait()
	s := r61Sums(t, rd)
	ps := reg.Snapshot().Pipelines[0]
	t.Logf("truth calls=%d attempts=%d; registry calls=%d attempts=%d succ=%d fail=%d; otel calls=%v attempts=%v",
		calls.Load(), attempts.Load(), ps.Calls, ps.Attempts, ps.Successes, ps.Failures, s["resilience.calls"], s["resilience.attempts"])
	if ps.Calls != uint64(calls.Load()) || ps.Attempts != uint64(attempts.Load()) {
		t.Errorf("registry calls/attempts %d/%d want %d/%d", ps.Calls, ps.Attempts, calls.Load(), attempts.Load())
	}
	if got := r61Total(s["resilience.attempts"]); got != attempts.Load() {
		t.Errorf("otel attempts %d, want %d (every attempt, panicked ones too)", got, attempts.Load())
	}
	if got := r61Total(s["resilience.calls"]); got != calls.Load() {
		t.Errorf("otel calls %d, want %d", got, calls.Load())
	}
}
