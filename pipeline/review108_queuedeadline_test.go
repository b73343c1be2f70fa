package pipeline_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/limit"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/resilience"
)

// review108: a healthy dependency that answers every call in latency,
// whatever the load. Callers each give the call budget; the pipeline's
// concurrency limit queues attempts. An attempt that the limit granted
// late, with less time left than the dependency's answers take, runs out
// of the caller's time: the time went in the toolkit's own queue, and the
// breaker counts it against the dependency (had: from admission), as it
// must for a dependency that hangs (review110).
func review108QueueRun(t *testing.T, lim *limit.Limiter, latency, budget, every time.Duration, n int, bopts ...breaker.Option) (opened int, rejectedOpen, ok, limited, deadline, sentShort, sentLong, longFailed int) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		b := breaker.New("dep", append(bopts, breaker.WithListener(resilience.ListenerFunc(func(e resilience.Event) {
			if e.Kind == resilience.EventStateChange && e.To == resilience.StateOpen {
				mu.Lock()
				opened++
				mu.Unlock()
			}
		})))...)
		p := pipeline.New(pipeline.WithBreaker(b), pipeline.WithLimit(lim))
		op := func(ctx context.Context) (int, error) {
			dl, _ := ctx.Deadline()
			short := time.Until(dl) < latency
			mu.Lock()
			if short {
				sentShort++
			} else {
				sentLong++
			}
			mu.Unlock()
			if !short {
				defer func() {
					if ctx.Err() != nil {
						mu.Lock()
						longFailed++
						mu.Unlock()
					}
				}()
			}
			select {
			case <-time.After(latency):
				return 1, nil
			case <-ctx.Done():
				return 0, ctx.Err()
			}
		}
		var wg sync.WaitGroup
		for i := 0; i < n; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ctx, cancel := context.WithTimeout(context.Background(), budget)
				defer cancel()
				_, err := pipeline.Do(ctx, p, op)
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err == nil:
					ok++
				case errors.Is(err, breaker.ErrOpen):
					rejectedOpen++
				case errors.Is(err, limit.ErrLimited):
					limited++
				default:
					deadline++
				}
			}()
			time.Sleep(every)
		}
		wg.Wait()
	})
	return
}

// TestReview108QueuedAttemptOpensBreakerOnHealthyDependency: a queue
// that stands in front of a healthy dependency whose answers take most of
// the callers' budgets sends attempts too late, and the breaker counts
// them (the time a call had is from its admission: judged from their
// sending, a hanging dependency's would never count, review110). The
// breaker package doc says so: it opens, and so serves more of those
// callers than the queue alone does, and the answers it times leave the
// queue out (200 ms, not up to 300).
func TestReview108QueuedAttemptOpensBreakerOnHealthyDependency(t *testing.T) {
	for _, tc := range []struct {
		name string
		lim  func() *limit.Limiter
	}{
		{"fixed", func() *limit.Limiter { return limit.NewFixed(2, limit.MaxWaiting(1000)) }},
		{"fixed-oldestontime", func() *limit.Limiter { return limit.NewFixed(2, limit.MaxWaiting(1000), limit.OldestOnTime()) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// 200 ms answers, 300 ms budgets (a plain client completes
			// every call), 2 slots: 10 calls/s served, 15/s offered.
			opened, rej, ok, limited, dl, short, long, longFailed := review108QueueRun(t, tc.lim(), 200*time.Millisecond, 300*time.Millisecond, 66*time.Millisecond, 300)
			t.Logf("opened %d times; ok %d, rejected open %d, limited %d, other errors %d; sent with less than 200 ms left %d, with more %d (of which failed %d)", opened, ok, rej, limited, dl, short, long, longFailed)
			if longFailed > 0 {
				t.Fatalf("rig: the dependency failed %d attempts sent with time enough", longFailed)
			}
			_, _, refOK, _, _, _, _, _ := review108QueueRun(t, tc.lim(), 200*time.Millisecond, 300*time.Millisecond, 66*time.Millisecond, 300, breaker.ConsecutiveFailures(0))
			t.Logf("the same load through a breaker that never opens: ok %d", refOK)
			if opened == 0 || ok <= refOK {
				t.Errorf("the breaker opened %d times, %d calls completed, against %d with a breaker that never opens: the package doc says it opens, and serves more", opened, ok, refOK)
			}
		})
	}
}
