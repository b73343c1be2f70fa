package pipeline

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/hedge"
	"github.com/resiliencekit/resiliencekit/limit"
	"github.com/resiliencekit/resiliencekit/resilience"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

func TestOutageNoSendWhileOpen(t *testing.T) {
	for run := range 40 {
		synctest.Test(t, func(t *testing.T) {
			var openedAt atomic.Int64
			b := breaker.New("dep", breaker.ConsecutiveFailures(5), breaker.OpenTimeout(300*time.Millisecond), breaker.HalfOpenRequests(2),
				breaker.WithListener(resilience.ListenerFunc(func(e resilience.Event) {
					if e.Kind == resilience.EventStateChange && e.To == resilience.StateOpen {
						openedAt.Store(time.Now().UnixNano())
					}
				})))
			opts := []Option{WithBreaker(b), WaitWhenOpen(), WithTimeBudget(2 * time.Second),
				WithRetry(retrypolicy.New(retrypolicy.BaseDelay(5 * time.Millisecond)))}
			if run%2 == 1 {
				opts = append(opts, WithLimit(limit.NewFixed(8, limit.MaxWaiting(100))),
					WithHedging(hedge.New(hedge.Delay(15*time.Millisecond), hedge.MaxShare(1))))
			}
			p := New(opts...)
			start := time.Now()
			down := func() bool {
				e := time.Since(start)
				return e < 700*time.Millisecond || e >= 1500*time.Millisecond && e < 2200*time.Millisecond
			}
			var whileOpen, sent, halfOpenOver atomic.Int32
			var inHalf atomic.Int32
			op := func(ctx context.Context) (int, error) {
				sent.Add(1)
				switch b.State() {
				case resilience.StateOpen:
					if since := time.Now().UnixNano() - openedAt.Load(); since > 0 {
						whileOpen.Add(1)
						t.Logf("sent while open at %v, %v after it opened: hedge=%v", time.Since(start), time.Duration(since), p.IsHedge(ctx))
					}
				case resilience.StateHalfOpen:
					if inHalf.Add(1) > 2 {
						halfOpenOver.Add(1)
					}
					defer inHalf.Add(-1)
				}
				time.Sleep(10 * time.Millisecond)
				if down() {
					return 0, errors.New("503")
				}
				return 1, nil
			}
			var wg sync.WaitGroup
			for range 30 {
				wg.Go(func() {
					for time.Since(start) < 4*time.Second {
						Do(context.Background(), p, op)
						time.Sleep(20 * time.Millisecond)
					}
				})
			}
			wg.Wait()
			if whileOpen.Load() > 0 || halfOpenOver.Load() > 0 {
				t.Errorf("run %d: %d of %d attempts sent while open; %d past the half-open probes", run, whileOpen.Load(), sent.Load(), halfOpenOver.Load())
			}
		})
	}
}
