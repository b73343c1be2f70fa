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

	"github.com/resiliencekit/resiliencekit/hedge"
	"github.com/resiliencekit/resiliencekit/limit"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/resilience"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
	"github.com/resiliencekit/resiliencekit/throttle"
)

// Many goroutines, retries, hedges, panics, Goexit, cancels, short
// deadlines: the fixed limit is never exceeded and no slot is lost.
func TestReview73LimitChaos(t *testing.T) {
	const n = 5
	l := limit.NewFixed(n, limit.MaxWaiting(50))
	th := throttle.New(throttle.Window(100 * time.Millisecond))
	p := pipeline.New(
		pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(3), retrypolicy.BaseDelay(time.Millisecond))),
		pipeline.WithHedging(hedge.New(hedge.Delay(time.Millisecond), hedge.MaxShare(1), hedge.MaxExtra(2))),
		pipeline.WithThrottle(th),
		pipeline.WithLimit(l),
		pipeline.WithAttemptTimeout(20*time.Millisecond),
	)
	var cur, peak atomic.Int64
	op := func(ctx context.Context) (int, error) {
		c := cur.Add(1)
		for {
			pk := peak.Load()
			if c <= pk || peak.CompareAndSwap(pk, c) {
				break
			}
		}
		defer cur.Add(-1)
		switch r := rand.IntN(20); {
		case r == 0:
			panic("boom")
		case r == 1:
			runtime.Goexit()
		case r < 6:
			return 0, errors.New("503")
		case r < 8:
			return 0, resilience.Permanent(errors.New("400"))
		case r < 10:
			<-ctx.Done()
			return 0, ctx.Err()
		}
		select {
		case <-time.After(time.Duration(rand.IntN(3000)) * time.Microsecond):
			return 1, nil
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
	var wg sync.WaitGroup
	deadline := time.Now().Add(3 * time.Second)
	for g := 0; g < 64; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(deadline) {
				func() {
					done := make(chan struct{})
					go func() {
						defer close(done)
						defer func() { recover() }()
						ctx, cancel := context.WithTimeout(context.Background(), time.Duration(1+rand.IntN(30))*time.Millisecond)
						defer cancel()
						if rand.IntN(10) == 0 {
							go func() { time.Sleep(time.Duration(rand.IntN(2000)) * time.Microsecond); cancel() }()
						}
						pipeline.Do(ctx, p, op)
					}()
					<-done
				}()
			}
		}()
	}
	wg.Wait()
	time.Sleep(100 * time.Millisecond)
	if pk := peak.Load(); pk > n {
		t.Errorf("peak in flight %d > limit %d", pk, n)
	}
	if f, w := l.InFlight(), l.Waiting(); f != 0 || w != 0 {
		t.Errorf("after all calls: InFlight %d Waiting %d, want 0 0", f, w)
	}
	t.Logf("peak %d, throttle p %.3f", peak.Load(), th.RejectProbability())
}

// The caller's own doings teach an adaptive limit and the throttle nothing.
func TestReview73CallerDoingsTeachNothing(t *testing.T) {
	l := limit.NewAIMD(limit.Initial(10), limit.MaxWaiting(1000))
	th := throttle.New()
	p := pipeline.New(
		pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(3), retrypolicy.BaseDelay(time.Millisecond))),
		pipeline.WithThrottle(th),
		pipeline.WithLimit(l),
	)
	var wg sync.WaitGroup
	for g := 0; g < 200; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 20; i++ {
				func() {
					defer func() { recover() }()
					done := make(chan struct{})
					go func() {
						defer close(done)
						defer func() { recover() }()
						ctx, cancel := context.WithTimeout(context.Background(), time.Duration(1+rand.IntN(5))*time.Millisecond)
						defer cancel()
						kind := rand.IntN(5)
						pipeline.Do(ctx, p, func(ctx context.Context) (int, error) {
							switch kind {
							case 0:
								panic("caller bug")
							case 1:
								runtime.Goexit()
							case 2: // caller's short deadline, client answers i/o timeout-ish
								<-ctx.Done()
								return 0, errors.New("read tcp: i/o timeout")
							case 3:
								cancel()
								return 0, errors.New("request canceled")
							}
							return 0, resilience.Permanent(errors.New("400 bad request"))
						})
					}()
					<-done
				}()
			}
		}()
	}
	wg.Wait()
	if lim := l.Limit(); lim < 10 {
		t.Errorf("AIMD limit fell to %d on the caller's own errors", lim)
	}
	if pr := th.RejectProbability(); pr > 0 {
		t.Errorf("throttle refuses with p %.3f after only the caller's errors", pr)
	}
	if f := l.InFlight(); f != 0 {
		t.Errorf("InFlight %d", f)
	}
	t.Logf("limit %d", l.Limit())
}
