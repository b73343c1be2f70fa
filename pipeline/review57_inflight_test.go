package pipeline_test

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
	"github.com/resiliencekit/resiliencekit/hedge"
	"github.com/resiliencekit/resiliencekit/limit"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/resilience"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

// Many goroutines, retries, hedges (several a race), an attempt timeout, a
// time budget, caller cancellations and deadlines, operations that panic,
// call runtime.Goexit, ignore their context, fail or succeed: the
// operations running at once never exceed a fixed limit, and once all is
// over the limiter holds nothing and queues nothing.
func TestReview57FixedLimitNeverExceeded(t *testing.T) {
	for _, waiting := range []int{0, 7, 1 << 20} {
		const n = 6
		l := limit.NewFixed(n, limit.MaxWaiting(waiting))
		var opts []pipeline.Option
		opts = append(opts,
			pipeline.WithTimeBudget(40*time.Millisecond),
			pipeline.WithBreaker(breaker.New("r57-inflight")),
			pipeline.WithRetry(retrypolicy.New(retrypolicy.BaseDelay(time.Millisecond), retrypolicy.MaxAttempts(4))),
			pipeline.WithHedging(hedge.New(hedge.Delay(time.Millisecond), hedge.MaxExtra(3), hedge.MaxShare(1))),
			pipeline.WithLimit(l),
			pipeline.WithAttemptTimeout(8*time.Millisecond),
		)
		p := pipeline.New(opts...)
		var cur, peak atomic.Int64
		op := func(ctx context.Context) (int, error) {
			c := cur.Add(1)
			defer cur.Add(-1)
			for {
				m := peak.Load()
				if c <= m || peak.CompareAndSwap(m, c) {
					break
				}
			}
			switch r := rand.IntN(100); {
			case r < 3:
				panic("op panics")
			case r < 6:
				runtime.Goexit()
			case r < 10: // ignores its context for a while
				time.Sleep(time.Duration(rand.IntN(15)) * time.Millisecond)
				return 0, errors.New("late")
			case r < 30:
				return 0, errors.New("transient")
			case r < 35:
				return 0, resilience.Permanent(errors.New("bad request"))
			}
			select {
			case <-time.After(time.Duration(rand.IntN(6000)) * time.Microsecond):
				return 1, nil
			case <-ctx.Done():
				return 0, ctx.Err()
			}
		}
		var wg sync.WaitGroup
		deadline := time.Now().Add(700 * time.Millisecond)
		for g := 0; g < 64; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for time.Now().Before(deadline) {
					done := make(chan struct{})
					go func() { // its own goroutine: the op may Goexit
						defer close(done)
						defer func() { _ = recover() }()
						ctx, cancel := context.WithCancel(context.Background())
						defer cancel()
						switch rand.IntN(4) {
						case 0:
							go func() { time.Sleep(time.Duration(rand.IntN(5000)) * time.Microsecond); cancel() }()
						case 1:
							ctx, cancel = context.WithTimeout(ctx, time.Duration(rand.IntN(20000))*time.Microsecond)
							defer cancel()
						}
						_, _ = pipeline.Do(ctx, p, op)
					}()
					<-done
				}
			}()
		}
		wg.Wait()
		// hedges that lost may still be running: give them time to end
		for i := 0; i < 200 && (l.InFlight() != 0 || cur.Load() != 0); i++ {
			time.Sleep(5 * time.Millisecond)
		}
		t.Logf("waiting %d: peak %d in flight (limit %d); now in flight %d, waiting %d", waiting, peak.Load(), n, l.InFlight(), l.Waiting())
		if peak.Load() > n {
			t.Errorf("waiting %d: %d operations ran at once, limit %d", waiting, peak.Load(), n)
		}
		if l.InFlight() != 0 || l.Waiting() != 0 {
			t.Errorf("waiting %d: after all calls, in flight %d, waiting %d: a slot leaked", waiting, l.InFlight(), l.Waiting())
		}
	}
}
