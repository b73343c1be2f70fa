package pipeline_test

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/resilience"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

type r110Untimer struct {
	mu   sync.Mutex
	done []resilience.Event
}

func (u *r110Untimer) Wants(k resilience.EventKind) bool { return k == resilience.EventCallDone }
func (u *r110Untimer) TimeCall() bool                    { return false }
func (u *r110Untimer) OnEvent(e resilience.Event) {
	if e.Kind == resilience.EventCallDone {
		u.mu.Lock()
		u.done = append(u.done, e)
		u.mu.Unlock()
	}
}

// An untimed call into the breaker tells its end exactly once, whatever
// way it ends: success, failure, rejection, panic, Goexit; with a budget
// behind the breaker, the out-of-time error is the pipeline's own
// (OwnBudget) as in a timed call.
func TestReview110UntimedEnds(t *testing.T) {
	u := &r110Untimer{}
	b := breaker.New("u", breaker.ConsecutiveFailures(2), breaker.OpenTimeout(time.Hour))
	p := pipeline.New(pipeline.WithBreaker(b), pipeline.WithListener(u), pipeline.WithTimeBudget(20*time.Millisecond),
		pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(2), retrypolicy.BaseDelay(time.Millisecond))))
	ctx := context.Background()
	want := 0
	check := func(what string, ok func(e resilience.Event) bool) {
		t.Helper()
		want++
		u.mu.Lock()
		defer u.mu.Unlock()
		if len(u.done) != want {
			t.Fatalf("%s: %d ends told, want %d", what, len(u.done), want)
		}
		e := u.done[want-1]
		if !e.Untimed || e.Duration != 0 || !ok(e) {
			t.Errorf("%s: %+v", what, e)
		}
	}
	_, _ = pipeline.Do(ctx, p, func(context.Context) (int, error) { return 1, nil })
	check("success", func(e resilience.Event) bool { return e.Err == nil })
	func() {
		defer func() { _ = recover() }()
		_, _ = pipeline.Do(ctx, p, func(context.Context) (int, error) { panic("boom") })
	}()
	check("panic", func(e resilience.Event) bool { return e.Err != nil })
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		_, _ = pipeline.Do(ctx, p, func(context.Context) (int, error) { runtime.Goexit(); return 0, nil })
	}()
	wg.Wait()
	check("goexit", func(e resilience.Event) bool { return e.Err != nil })
	_, err := pipeline.Do(ctx, p, func(ctx context.Context) (int, error) { <-ctx.Done(); return 0, ctx.Err() })
	var re *retrypolicy.Error
	if !errors.As(err, &re) || !re.OwnBudget {
		t.Errorf("budget ran out: %v, OwnBudget not set", err)
	}
	check("out of budget", func(e resilience.Event) bool { return e.Err != nil })
	if b.State() == resilience.StateClosed {
		// ran out of its own budget twice? one failure so far; fail again
		_, _ = pipeline.Do(ctx, p, func(context.Context) (int, error) { return 0, resilience.Terminal(errors.New("x")) })
		check("fail", func(e resilience.Event) bool { return e.Err != nil })
	}
	_, err = pipeline.Do(ctx, p, func(context.Context) (int, error) { return 1, nil })
	if !breaker.IsRejection(err) {
		t.Fatalf("want a rejection, got %v (state %v)", err, b.State())
	}
	check("rejected", func(e resilience.Event) bool { return breaker.IsRejection(e.Err) })
}
