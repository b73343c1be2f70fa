package pipeline_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
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
	"github.com/resiliencekit/resiliencekit/retrypolicy"
	"github.com/resiliencekit/resiliencekit/throttle"
	"go.uber.org/goleak"
)

var errReview120Panic = errors.New("review120 panic")

// Real time, many goroutines, under -race: panics and runtime.Goexit in
// ops, hedges up to 5, retries, a queue, a fixed or adaptive limit, a
// throttle and a breaker. No call hangs; the limiter comes back to no
// slot held and no waiter; with a fixed limit, a queue deep enough for
// every caller and no deadlines, no call is refused; no goroutine leaks.
func TestReview120RealStress(t *testing.T) {
	prev := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(io.Discard, nil)))
	defer slog.SetDefault(prev)
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	for _, tc := range []struct {
		name     string
		adaptive bool
		throttle bool
		breaker  bool
		waiting  bool
		waitOpen bool
	}{
		{name: "fixed"},
		{name: "fixedQueue", waiting: true},
		{name: "aimd", adaptive: true},
		{name: "aimdQueueThrottleBreaker", adaptive: true, waiting: true, throttle: true, breaker: true},
		{name: "fixedBreakerWaitOpen", breaker: true, waitOpen: true, waiting: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const L, N = 6, 10
			var l *limit.Limiter
			var lopts []limit.Option
			if tc.waiting {
				lopts = append(lopts, limit.MaxWaiting(N))
			}
			if tc.adaptive {
				l = limit.NewAIMD(append(lopts, limit.Initial(L), limit.Min(4))...)
			} else {
				l = limit.NewFixed(L, lopts...)
			}
			opts := []pipeline.Option{pipeline.WithLimit(l),
				pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(4), retrypolicy.BaseDelay(time.Millisecond), retrypolicy.MaxDelay(2*time.Millisecond))),
				pipeline.WithHedging(hedge.New(hedge.Delay(2*time.Millisecond), hedge.MaxExtra(1+rand.IntN(5)), hedge.MaxShare(1)))}
			if tc.throttle {
				opts = append(opts, pipeline.WithThrottle(throttle.New()))
			}
			if tc.breaker {
				opts = append(opts, pipeline.WithBreaker(breaker.New("r120", breaker.ConsecutiveFailures(1000))))
			}
			if tc.waitOpen {
				opts = append(opts, pipeline.WaitWhenOpen())
			}
			p := pipeline.New(opts...)
			var wg sync.WaitGroup
			var calls, fails, limited, panics, goexits atomic.Int32
			stop := time.Now().Add(1500 * time.Millisecond)
			for caller := range N {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := 0; time.Now().Before(stop); i++ {
						want := fmt.Sprint(caller, "/", i)
						op := func(ctx context.Context) (string, error) {
							x := rand.IntN(1000)
							switch {
							case x < 5:
								panic(errReview120Panic)
							case x < 8:
								runtime.Goexit()
							case x < 600:
								time.Sleep(time.Duration(rand.IntN(500)) * time.Microsecond)
							case x < 900:
								select {
								case <-ctx.Done():
									return "", ctx.Err()
								case <-time.After(time.Duration(rand.IntN(8)) * time.Millisecond):
								}
							case x < 950:
								time.Sleep(time.Millisecond)
								return "", review120Transient
							default:
								time.Sleep(time.Duration(rand.IntN(6)) * time.Millisecond)
							}
							return want, nil
						}
						ended := make(chan struct{})
						var res string
						var err error
						var pv any
						returned := false
						go func() {
							defer close(ended)
							defer func() { pv = recover() }()
							if i%2 == 0 {
								res, err = pipeline.Do(context.Background(), p, op)
							} else {
								var rel func()
								res, rel, err = pipeline.DoStream(context.Background(), p, op)
								rel()
							}
							returned = true
						}()
						select {
						case <-ended:
						case <-time.After(10 * time.Second):
							t.Errorf("call %s hangs", want)
							return
						}
						calls.Add(1)
						switch {
						case pv != nil:
							if pv != errReview120Panic {
								t.Errorf("call %s panicked with %v", want, pv)
							}
							panics.Add(1)
						case !returned:
							goexits.Add(1)
						case err == nil && res != want:
							t.Errorf("call %s: result %q", want, res)
						case err != nil && errors.Is(err, limit.ErrLimited):
							limited.Add(1)
							if !tc.adaptive && tc.waiting {
								t.Errorf("call %s refused with a queue for every caller: %v", want, err)
							}
						case err != nil && !errors.Is(err, review120Transient):
							t.Errorf("call %s: %v", want, err)
						case err != nil:
							fails.Add(1)
						}
					}
				}()
			}
			wg.Wait()
			deadline := time.Now().Add(3 * time.Second)
			for (l.InFlight() != 0 || l.Waiting() != 0) && time.Now().Before(deadline) {
				time.Sleep(10 * time.Millisecond)
			}
			if l.InFlight() != 0 || l.Waiting() != 0 {
				t.Errorf("at the end: InFlight %d, Waiting %d", l.InFlight(), l.Waiting())
			}
			t.Logf("calls %d fails %d limited %d panics %d goexits %d limit %d", calls.Load(), fails.Load(), limited.Load(), panics.Load(), goexits.Load(), l.Limit())
		})
	}
}
