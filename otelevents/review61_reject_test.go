package otelevents_test

import (
	"context"
	"errors"
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

// TestReview61Rejections: a breaker that opens mid-call (its guard stops
// the retries) and then rejects calls. resilience.rejections is documented
// as "calls a breaker rejected"; the registry's Rejected likewise.
func TestReview61Rejections(t *testing.T) {
	l, rd := r61New(t)
	reg := registry.New()
	b := breaker.New("dep", breaker.ConsecutiveFailures(3), breaker.OpenTimeout(time.Hour))
	p, err := reg.AddPipeline(pipeline.New(pipeline.WithBreaker(b),
		pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(5), retrypolicy.BaseDelay(time.Microsecond), retrypolicy.MaxDelay(time.Microsecond))),
		pipeline.WithListener(l)))
	if err != nil {
		t.Fatal(err)
	}
	var attempts, calls, rejectedCalls, ranAndFailed atomic.Int64
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 50; i++ {
				calls.Add(1)
				ran := false
				_, err := pipeline.Do(context.Background(), p, func(ctx context.Context) (int, error) {
					ran = true
					attempts.Add(1)
					return 0, r61Transient
				})
				switch {
				case !ran && breaker.IsRejection(err):
					rejectedCalls.Add(1)
				case ran:
					ranAndFailed.Add(1)
				default:
					t.Errorf("unexpected %v", err)
				}
			}
		}()
	}
	wg.Wait()
	s := r61Sums(t, rd)
	ps := reg.Snapshot().Pipelines[0]
	t.Logf("truth calls=%d attempts=%d rejectedCalls=%d ranAndFailed=%d", calls.Load(), attempts.Load(), rejectedCalls.Load(), ranAndFailed.Load())
	t.Logf("otel calls=%v attempts=%v rejections=%v retries=%v giveups=%v state=%v", s["resilience.calls"], s["resilience.attempts"], s["resilience.rejections"], s["resilience.retries"], s["resilience.giveups"], s["resilience.breaker.state"])
	t.Logf("registry calls=%d attempts=%d succ=%d fail=%d rej=%d retries=%d", ps.Calls, ps.Attempts, ps.Successes, ps.Failures, ps.Rejected, ps.Retries)
	if got := r61Total(s["resilience.rejections"]); got != rejectedCalls.Load() {
		t.Errorf("otel rejections %d, want %d calls a breaker rejected", got, rejectedCalls.Load())
	}
	if ps.Rejected != uint64(rejectedCalls.Load()) {
		t.Errorf("registry Rejected %d, want %d", ps.Rejected, rejectedCalls.Load())
	}
	if ps.Failures != uint64(ranAndFailed.Load()) {
		t.Errorf("registry Failures %d, want %d", ps.Failures, ranAndFailed.Load())
	}
	if r61Total(s["resilience.attempts"]) != attempts.Load() || r61Total(s["resilience.calls"]) != calls.Load() {
		t.Errorf("otel attempts/calls off")
	}
	if ps.Attempts != uint64(attempts.Load()) || ps.Calls != uint64(calls.Load()) {
		t.Errorf("registry attempts/calls off")
	}
}

// TestReview61WaitWhenOpen: calls that wait for an open breaker and then
// succeed. Each is one call; each refusal counted once.
func TestReview61WaitWhenOpen(t *testing.T) {
	l, rd := r61New(t)
	reg := registry.New()
	b := breaker.New("dep", breaker.ConsecutiveFailures(1), breaker.OpenTimeout(20*time.Millisecond))
	p, err := reg.AddPipeline(pipeline.New(pipeline.WithBreaker(b), pipeline.WaitWhenOpen(), pipeline.WithTimeBudget(5*time.Second),
		pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(3), retrypolicy.BaseDelay(time.Millisecond), retrypolicy.MaxDelay(time.Millisecond))),
		pipeline.WithListener(l)))
	if err != nil {
		t.Fatal(err)
	}
	var healthy atomic.Bool
	var attempts, calls, okCalls atomic.Int64
	// open it
	_, _ = pipeline.Do(context.Background(), p, func(ctx context.Context) (int, error) {
		attempts.Add(1)
		return 0, r61Transient
	})
	calls.Add(1)
	if b.State() != resilience.StateOpen {
		t.Fatalf("state %v", b.State())
	}
	var wg sync.WaitGroup
	for g := 0; g < 50; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			calls.Add(1)
			_, err := pipeline.Do(context.Background(), p, func(ctx context.Context) (int, error) {
				attempts.Add(1)
				if !healthy.Load() {
					return 0, r61Transient
				}
				return 1, nil
			})
			if err == nil {
				okCalls.Add(1)
			}
		}()
	}
	time.Sleep(100 * time.Millisecond)
	healthy.Store(true)
	wg.Wait()
	s := r61Sums(t, rd)
	snap := reg.Snapshot()
	runtime.KeepAlive(p) // the registry holds pipelines weakly: p, unused from here, could be collected first
	if len(snap.Pipelines) != 1 {
		t.Fatalf("%d pipelines registered", len(snap.Pipelines))
	}
	ps := snap.Pipelines[0]
	t.Logf("truth calls=%d attempts=%d ok=%d", calls.Load(), attempts.Load(), okCalls.Load())
	t.Logf("otel calls=%v attempts=%v rejections=%v retries=%v giveups=%v", s["resilience.calls"], s["resilience.attempts"], s["resilience.rejections"], s["resilience.retries"], s["resilience.giveups"])
	t.Logf("registry calls=%d attempts=%d succ=%d fail=%d rej=%d retries=%d waited=%d", ps.Calls, ps.Attempts, ps.Successes, ps.Failures, ps.Rejected, ps.Retries, ps.Waited)
	if r61Total(s["resilience.calls"]) != calls.Load() || r61Total(s["resilience.attempts"]) != attempts.Load() {
		t.Errorf("otel calls/attempts off")
	}
	if ps.Calls != uint64(calls.Load()) || ps.Attempts != uint64(attempts.Load()) || ps.Successes != uint64(okCalls.Load()) ||
		ps.Failures != uint64(calls.Load()-okCalls.Load()) {
		t.Errorf("registry off")
	}
	if s["resilience.calls"]["dep|success"] != okCalls.Load() {
		t.Errorf("otel success off")
	}
	_ = errors.New
}

// TestReview61StoppedRetriesNotARejection: call A is admitted, its first
// attempt fails; while A sleeps before its retry, call B fails and opens
// the breaker (ConsecutiveFailures 1), whose check then stops A's retries.
// A was not rejected by the breaker (it ran an attempt); B neither.
// resilience.rejections is documented as "calls a breaker rejected".
func TestReview61StoppedRetriesNotARejection(t *testing.T) {
	l, rd := r61New(t)
	reg := registry.New()
	b := breaker.New("dep", breaker.ConsecutiveFailures(1), breaker.OpenTimeout(time.Hour))
	p, err := reg.AddPipeline(pipeline.New(pipeline.WithBreaker(b), pipeline.WithListener(l),
		pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(5), retrypolicy.BaseDelay(50*time.Millisecond), retrypolicy.MaxDelay(50*time.Millisecond), retrypolicy.Jitter(retrypolicy.None)))))
	if err != nil {
		t.Fatal(err)
	}
	aFailed := make(chan struct{})
	aDone := make(chan error)
	var runs atomic.Int64
	go func() {
		_, err := pipeline.Do(context.Background(), p, func(ctx context.Context) (int, error) {
			if runs.Add(1) == 1 {
				close(aFailed)
			}
			return 0, r61Transient
		})
		aDone <- err
	}()
	<-aFailed
	time.Sleep(5 * time.Millisecond)
	_, _ = pipeline.Do(context.Background(), p, func(ctx context.Context) (int, error) {
		runs.Add(1)
		return 0, resilience.Terminal(errors.New("down"))
	})
	errA := <-aDone
	s := r61Sums(t, rd)
	ps := reg.Snapshot().Pipelines[0]
	t.Logf("runs %d, A: %v; otel rejections %v calls %v; registry rejected %d failures %d", runs.Load(), errA, s["resilience.rejections"], s["resilience.calls"], ps.Rejected, ps.Failures)
	if b.State() != resilience.StateOpen {
		t.Fatalf("state %v", b.State())
	}
	if got := r61Total(s["resilience.rejections"]); got != 0 {
		t.Errorf("resilience.rejections %d, but no call was rejected by the breaker (both ran attempts)", got)
	}
}
