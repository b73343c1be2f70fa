// Command quickstart calls a fake dependency that is down for its first
// second and then recovers, through a Pipeline of a time budget, a circuit
// breaker and a jittered retry. It prints every attempt, every delay and
// every change of the breaker's state.
package main

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/resilience"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

// inventory is a fake remote service: it refuses connections until up.
type inventory struct {
	up    time.Time
	calls atomic.Int64
}

func (s *inventory) stock(ctx context.Context, sku string) (int, error) {
	n := s.calls.Add(1)
	if time.Now().Before(s.up) {
		fmt.Printf("    attempt (call #%d): connection refused\n", n)
		return 0, errors.New("connection refused")
	}
	fmt.Printf("    attempt (call #%d): ok\n", n)
	return 7, nil
}

func main() {
	fmt.Print(`Legend:
  call N at T (breaker S)  the caller's Nth call, T after the start, and the breaker's state then
  attempt (call #N): ...   the Nth request the dependency received, and what it answered
  retry after attempt ...  the retry's jittered delay before the next attempt of the same call
  breaker NAME: A -> B     the breaker changed state
  => ...                   what the caller got back

`)
	start := time.Now()
	dep := &inventory{up: start.Add(time.Second)}

	b := breaker.New("inventory",
		breaker.ConsecutiveFailures(2),
		breaker.OpenTimeout(300*time.Millisecond),
	)
	// One listener hears the pipeline: its retries and its breaker's state changes.
	events := resilience.ListenerFunc(func(e resilience.Event) {
		switch e.Kind {
		case resilience.EventStateChange:
			fmt.Printf("    breaker %s: %s -> %s\n", e.Name, e.From, e.To)
		case resilience.EventRetry:
			fmt.Printf("    retry after attempt %d in %v\n", e.Attempt, e.Delay.Round(time.Millisecond))
		}
	})
	p := pipeline.New(
		pipeline.WithTimeBudget(time.Second),
		pipeline.WithBreaker(b),
		pipeline.WithRetry(retrypolicy.New(
			retrypolicy.MaxAttempts(3),
			retrypolicy.BaseDelay(40*time.Millisecond),
		)),
		pipeline.WithListener(events),
		pipeline.WithAttemptTimeout(200*time.Millisecond),
	)

	for i := 1; i <= 8; i++ {
		fmt.Printf("call %d at %v (breaker %s)\n", i, time.Since(start).Round(10*time.Millisecond), b.State())
		n, err := pipeline.Do(context.Background(), p, func(ctx context.Context) (int, error) {
			return dep.stock(ctx, "sku-42")
		})
		switch {
		case errors.Is(err, breaker.ErrOpen):
			fmt.Println("  => rejected at once: the breaker is open")
		case err != nil:
			fmt.Printf("  => failed: %v\n", err)
		default:
			fmt.Printf("  => %d in stock\n", n)
		}
		time.Sleep(200 * time.Millisecond)
	}
	fmt.Printf("the dependency saw %d calls\n", dep.calls.Load())
}
