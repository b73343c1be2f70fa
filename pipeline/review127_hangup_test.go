package pipeline_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

// A dependency that fails every attempt (transient, at once); each caller
// gives up (cancels) while its call waits before a retry. The dependency
// failed every call it was sent: does the breaker ever open?
func TestReview127CancelMidBackoffBreaker(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := breaker.New("r127c", breaker.ConsecutiveFailures(3))
		p := pipeline.New(
			pipeline.WithBreaker(b),
			pipeline.WithRetry(retrypolicy.New(retrypolicy.BaseDelay(time.Second), retrypolicy.Jitter(retrypolicy.None))),
		)
		sent := 0
		for range 20 {
			ctx, cancel := context.WithCancel(t.Context())
			go func() { time.Sleep(500 * time.Millisecond); cancel() }()
			start := time.Now()
			_, err := pipeline.Do(ctx, p, func(ctx context.Context) (int, error) {
				sent++
				return 0, errors.New("503")
			})
			if time.Since(start) != 500*time.Millisecond && !errors.Is(err, breaker.ErrOpen) {
				t.Fatalf("returned after %v", time.Since(start))
			}
			if !errors.Is(err, context.Canceled) && !errors.Is(err, breaker.ErrOpen) {
				t.Fatalf("err %v", err)
			}
			cancel()
		}
		time.Sleep(time.Second) // the cancelling goroutines of the calls the open breaker refused at once
		t.Logf("sent %d; breaker %v, counts %+v", sent, b.State(), b.Counts())
		if sent > 3 {
			t.Errorf("the dependency failed %d calls in a row, each caller giving up during its backoff; the breaker stayed %v (counts %+v)", sent, b.State(), b.Counts())
		}
	})
}

// The realistic case: this service's handler calls the dependency with
// its request's context, which net/http cancels when the upstream client
// (a plain client with a 300 ms timeout, no deadline header) hangs up.
// Default retry policy; the dependency is down and answers 503 in 50 ms.
func TestReview127HangupsOpenTheBreaker(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := breaker.New("r127h") // 5 consecutive failures
		p := pipeline.New(pipeline.WithBreaker(b), pipeline.WithRetry(retrypolicy.New()))
		sent, calls := 0, 200
		for range calls {
			ctx, cancel := context.WithCancel(t.Context())
			stop := time.AfterFunc(300*time.Millisecond, cancel)
			pipeline.Do(ctx, p, func(ctx context.Context) (int, error) {
				sent++
				select {
				case <-time.After(50 * time.Millisecond):
					return 0, errors.New("503")
				case <-ctx.Done():
					return 0, ctx.Err()
				}
			})
			stop.Stop()
			cancel()
			time.Sleep(10 * time.Millisecond)
		}
		c := b.Counts()
		t.Logf("%d calls, %d requests sent; breaker %v, counts %+v", calls, sent, b.State(), c)
		if sent > calls/2 {
			t.Errorf("a dead dependency got %d requests from %d calls; breaker never opened (%v, %+v)", sent, calls, b.State(), c)
		}
	})
}
