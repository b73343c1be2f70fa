package pipeline_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/resiliencekit/resiliencekit/hedge"
	"github.com/resiliencekit/resiliencekit/limit"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
	"github.com/resiliencekit/resiliencekit/throttle"
)

// Real time, short: every stage on, callers canceling, operations that
// panic, hang until canceled or fail; at the end no goroutine is left and
// the limit is whole.
func TestReview160NoLeakRealTime(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	lim := limit.NewAIMD(limit.Initial(4), limit.MaxWaiting(20))
	th := throttle.New(throttle.Window(time.Second))
	q := retrypolicy.NewQuota(0.2, 5, time.Second)
	p := pipeline.New(pipeline.WithTimeBudget(300*time.Millisecond), pipeline.WithAttemptTimeout(80*time.Millisecond),
		pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(3), retrypolicy.BaseDelay(2*time.Millisecond), retrypolicy.WithQuota(q))),
		pipeline.WithHedging(hedge.New(hedge.Delay(5*time.Millisecond), hedge.MaxShare(1))),
		pipeline.WithThrottle(th), pipeline.WithLimit(lim))
	var wg sync.WaitGroup
	deadline := time.Now().Add(1500 * time.Millisecond)
	for g := range 16 {
		wg.Go(func() {
			for i := 0; time.Now().Before(deadline); i++ {
				ctx, cancel := context.WithTimeout(context.Background(), time.Duration(20+(i*g)%200)*time.Millisecond)
				func() {
					defer func() { recover() }()
					pipeline.Do(ctx, p, func(ctx context.Context) (int, error) {
						switch (i + g) % 10 {
						case 0:
							panic("r160")
						case 1, 2:
							<-ctx.Done()
							return 0, ctx.Err()
						case 3:
							return 0, errors.New("503")
						}
						select {
						case <-time.After(time.Duration(1+i%10) * time.Millisecond):
							return 1, nil
						case <-ctx.Done():
							return 0, ctx.Err()
						}
					})
				}()
				cancel()
			}
		})
	}
	wg.Wait()
	time.Sleep(50 * time.Millisecond)
	if lim.InFlight() != 0 || lim.Waiting() != 0 {
		t.Errorf("in flight %d, waiting %d", lim.InFlight(), lim.Waiting())
	}
}
