package pipeline

import (
	"context"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/hedge"
	"github.com/resiliencekit/resiliencekit/resilience"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

type r3Count struct {
	attempts, calls, retries atomic.Int64
}

func (c *r3Count) OnEvent(e resilience.Event) {
	switch e.Kind {
	case resilience.EventAttempt:
		c.attempts.Add(1)
	case resilience.EventCallDone:
		c.calls.Add(1)
	case resilience.EventRetry:
		c.retries.Add(1)
	}
}

func (c *r3Count) Wants(k resilience.EventKind) bool {
	return k != resilience.EventRejected || rand.IntN(2) == 0
}

// Many goroutines, hedging, budget, attempt timeout, a breaker and a
// listener wanting attempts: the EventAttempt count equals the attempts
// the retry stage made (counted by the operation's group ends), with
// -race, and no goroutine left behind.
func TestReview3StressEvents(t *testing.T) {
	if testing.Short() {
		t.Skip()
	}
	before := runtime.NumGoroutine()
	l := &r3Count{}
	b := breaker.New("r3-stress", breaker.ConsecutiveFailures(1000000))
	p := New(WithBreaker(b), WithListener(l),
		WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(3), retrypolicy.BaseDelay(0))),
		WithHedging(hedge.New(hedge.Delay(200*time.Microsecond), hedge.MaxShare(1))),
		WithTimeBudget(50*time.Millisecond), WithAttemptTimeout(5*time.Millisecond))
	var wg sync.WaitGroup
	const G, N = 16, 300
	for g := 0; g < G; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < N; i++ {
				_, _ = Do(context.Background(), p, func(ctx context.Context) (int, error) {
					if rand.IntN(3) == 0 {
						select {
						case <-ctx.Done():
							return 0, ctx.Err()
						case <-time.After(time.Duration(rand.IntN(1000)) * time.Microsecond):
						}
					}
					if rand.IntN(3) == 0 {
						return 0, r3Transient
					}
					return 1, nil
				})
			}
		}()
	}
	wg.Wait()
	if got := l.calls.Load(); got != G*N {
		t.Errorf("calls %d, want %d", got, G*N)
	}
	// each call: attempts = retries + 1 unless it ended without an attempt
	if a, r := l.attempts.Load(), l.retries.Load(); a != r+G*N {
		t.Errorf("attempts %d, retries %d, calls %d: want attempts = retries + calls", a, r, G*N)
	}
	deadline := time.Now().Add(2 * time.Second)
	for runtime.NumGoroutine() > before+2 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > before+2 {
		t.Errorf("goroutines %d, before %d", n, before)
	}
}
