package pipeline_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/resiliencekit/resiliencekit/hedge"
	"github.com/resiliencekit/resiliencekit/limit"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
	"github.com/resiliencekit/resiliencekit/throttle"
)

var errR121 = errors.New("review121: 503")

// Many calls with hedges through a fixed limit, in virtual time: ops that
// succeed, fail, panic, call runtime.Goexit, ignore their context. The
// dependency never sees more than the limit at once, no slot leaks, and
// no caller gets errYielded.
func TestReview121Stress(t *testing.T) {
	for seed := range uint64(12) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) { review121Stress(t, seed) })
		})
	}
}

func review121Stress(t *testing.T, seed uint64) {
	const n = 6
	rng := rand.New(rand.NewPCG(seed, 121))
	var mu sync.Mutex
	rnd := func(k int) int { mu.Lock(); defer mu.Unlock(); return rng.IntN(k) }
	var l *limit.Limiter
	fixed := seed%3 != 0
	if fixed {
		l = limit.NewFixed(n, limit.MaxWaiting(int(seed%4)))
	} else {
		l = limit.NewAIMD(limit.Initial(8), limit.Min(2), limit.Backoff(0.5), limit.MaxWaiting(int(seed%4)))
	}
	opts := []pipeline.Option{pipeline.WithLimit(l),
		pipeline.WithHedging(hedge.New(hedge.Delay(3*time.Millisecond), hedge.MaxShare(1), hedge.MaxExtra(int(1+seed%3)))),
		pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(3), retrypolicy.BaseDelay(time.Millisecond)))}
	if seed%2 == 0 {
		opts = append(opts, pipeline.WithThrottle(throttle.New()))
	}
	if seed%4 == 1 {
		opts = append(opts, pipeline.WithAttemptTimeout(15*time.Millisecond))
	}
	p := pipeline.New(opts...)
	var cur, peak atomic.Int64
	op := func(ctx context.Context) (int, error) {
		c := cur.Add(1)
		for {
			m := peak.Load()
			if c <= m || peak.CompareAndSwap(m, c) {
				break
			}
		}
		defer cur.Add(-1)
		d := time.Duration(1+rnd(12)) * time.Millisecond
		switch k := rnd(20); {
		case k == 0:
			panic("review121 op panic")
		case k == 1:
			runtime.Goexit()
		case k < 4: // ignores its context
			time.Sleep(d * 3)
			return 1, nil
		case k < 7:
			select {
			case <-time.After(d):
				return 0, errR121
			case <-ctx.Done():
				return 0, ctx.Err()
			}
		}
		select {
		case <-time.After(d):
			return 1, nil
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
	var wg sync.WaitGroup
	var yielded, calls atomic.Int64
	for i := range 300 {
		if i%10 == 0 {
			time.Sleep(time.Duration(rnd(5)) * time.Millisecond)
		}
		wg.Go(func() {
			done := make(chan struct{})
			go func() {
				defer close(done)
				defer func() { recover() }()
				ctx, cancel := context.WithTimeout(context.Background(), time.Duration(5+rnd(80))*time.Millisecond)
				defer cancel()
				var err error
				if rnd(2) == 0 {
					_, err = pipeline.Do(ctx, p, op)
				} else {
					var rel func()
					_, rel, err = pipeline.DoStream(ctx, p, op)
					rel()
				}
				calls.Add(1)
				if err != nil && strings.Contains(err.Error(), "gave its slot") {
					yielded.Add(1)
					t.Errorf("a caller got errYielded: %v", err)
				}
			}()
			<-done
		})
	}
	wg.Wait()
	time.Sleep(time.Second) // hedges that ignore their contexts
	if fixed && peak.Load() > n {
		t.Errorf("seed %d: %d ops ran at once through a limit of %d", seed, peak.Load(), n)
	}
	if got := l.InFlight(); got != 0 {
		t.Errorf("seed %d: InFlight %d at rest", seed, got)
	}
	if got := l.Waiting(); got != 0 {
		t.Errorf("seed %d: Waiting %d at rest", seed, got)
	}
	t.Logf("seed %d: calls %d, peak %d, limit %d", seed, calls.Load(), peak.Load(), l.Limit())
}
