package pipeline

import (
	"context"
	"errors"
	"math/rand/v2"
	"runtime"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/hedge"
	"github.com/resiliencekit/resiliencekit/limit"
	"github.com/resiliencekit/resiliencekit/resilience"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
	"github.com/resiliencekit/resiliencekit/throttle"
)

// Many goroutines, every stage, operations that panic, Goexit, ignore
// cancellation or fail; callers that cancel. No race, no leak, no hang.
func TestStress(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	lim := limit.NewAIMD(limit.MaxWaiting(50))
	b := breaker.New("stress", breaker.ConsecutiveFailures(20), breaker.OpenTimeout(20*time.Millisecond))
	p := New(WithBreaker(b), WaitWhenOpen(), WithTimeBudget(200*time.Millisecond),
		WithRetry(retrypolicy.New(retrypolicy.BaseDelay(time.Millisecond))),
		WithHedging(hedge.New(hedge.Delay(2*time.Millisecond), hedge.MaxExtra(2), hedge.MaxShare(1))),
		WithThrottle(throttle.New()), WithLimit(lim),
		WithAttemptTimeout(20*time.Millisecond))
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Go(func() {
			for i := range 60 {
				ctx, cancel := context.WithCancel(context.Background())
				if i%7 == 0 {
					time.AfterFunc(3*time.Millisecond, cancel)
				}
				func() {
					defer func() { recover() }()
					done := make(chan struct{})
					go func() {
						defer close(done)
						op := func(ctx context.Context) (int, error) {
							switch rand.IntN(12) {
							case 0:
								panic("boom")
							case 1:
								runtime.Goexit()
							case 2:
								time.Sleep(5 * time.Millisecond) // ignores ctx
								return 0, errors.New("late")
							case 3, 4:
								return 0, errors.New("transient")
							case 5:
								return 0, resilience.Permanent(errors.New("400"))
							}
							select {
							case <-ctx.Done():
								return 0, ctx.Err()
							case <-time.After(time.Duration(rand.IntN(4)) * time.Millisecond):
							}
							return 1, nil
						}
						defer func() { recover() }()
						if g%2 == 0 {
							_, rel, _ := DoStream(ctx, p, op)
							rel()
						} else {
							Do(ctx, p, op)
						}
					}()
					<-done
				}()
				cancel()
			}
		})
	}
	wg.Wait()
	time.Sleep(300 * time.Millisecond)
	if lim.InFlight() != 0 || lim.Waiting() != 0 || p.cfg.pacer.limit.InFlight() != 0 || p.cfg.pacer.backlog.Load() != 0 {
		t.Errorf("left: limit %d in flight %d waiting; pacer %d in flight, backlog %d", lim.InFlight(), lim.Waiting(), p.cfg.pacer.limit.InFlight(), p.cfg.pacer.backlog.Load())
	}
	t.Logf("limit %d, pacer limit %d, breaker %v", lim.Limit(), p.cfg.pacer.limit.Limit(), b.State())
}
