package pipeline_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/resiliencekit/resiliencekit/hedge"
	"github.com/resiliencekit/resiliencekit/limit"
	"github.com/resiliencekit/resiliencekit/pipeline"
)

// review123FailEvery makes every n-th call's attempts fail (0: none).
var review123FailEvery int

// review123Cut counts the attempts cut before their answer was due.
var review123Cut atomic.Int64

// review123Run runs, in a synctest bubble, a schedule of 80 calls drawn
// from seed through a pipeline of mk's limit, hedged if hedged; each
// call's op, whichever attempt runs it, answers at the call's start plus
// its duration (or when its context ends). It returns the calls that
// failed.

func review123Run(t *testing.T, seed uint64, hedged, stream bool, mk func() *limit.Limiter) (map[int]error, *limit.Limiter) {
	var failed map[int]error
	var lim *limit.Limiter
	synctest.Test(t, func(t *testing.T) {
		r := rand.New(rand.NewPCG(seed, 3))
		lim = mk()
		opts := []pipeline.Option{pipeline.WithLimit(lim)}
		extra := 1 + r.IntN(2)
		if hedged {
			opts = append(opts, pipeline.WithHedging(hedge.New(hedge.Delay(10*time.Millisecond), hedge.MaxExtra(extra), hedge.MaxShare(1))))
		}
		p := pipeline.New(opts...)
		failed = map[int]error{}
		var mu sync.Mutex
		var wg sync.WaitGroup
		n := 80
		gapMax := 5000 + r.IntN(20000)
		gaps := make([]time.Duration, n)
		durs := make([]time.Duration, n)
		for i := range n {
			gaps[i] = time.Duration(r.IntN(gapMax)) * time.Microsecond
			durs[i] = time.Duration(1+r.IntN(60000)) * time.Microsecond
		}
		for i := range n {
			time.Sleep(gaps[i])
			end := time.Now().Add(durs[i])
			wg.Add(1)
			go func() {
				defer wg.Done()
				ctx, cancel := context.WithTimeout(context.Background(), time.Second)
				defer cancel()
				op := func(ctx context.Context) (int, error) {
					select {
					case <-time.After(time.Until(end)):
						if review123FailEvery > 0 && i%review123FailEvery == 0 {
							return 0, fmt.Errorf("503")
						}
						return i, nil
					case <-ctx.Done():
						if time.Now().Before(end) {
							review123Cut.Add(1)
						}
						return 0, ctx.Err()
					}
				}
				var err error
				if stream {
					var rel func()
					_, rel, err = pipeline.DoStream(ctx, p, op)
					if rel != nil {
						rel()
					}
				} else {
					_, err = pipeline.Do(ctx, p, op)
				}
				if err != nil {
					mu.Lock()
					failed[i] = err
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		synctest.Wait()
		if lim.InFlight() != 0 || lim.Waiting() != 0 {
			t.Errorf("seed %d hedged=%v stream=%v: limiter left with inFlight=%d waiting=%d", seed, hedged, stream, lim.InFlight(), lim.Waiting())
		}
	})
	return failed, lim
}

// One schedule, with hedging and without: no more calls fail with it.
func TestReview123One(t *testing.T) {
	p, _ := review123Run(t, 1, false, false, func() *limit.Limiter { return limit.NewFixed(6, limit.MaxWaiting(1)) })
	h, _ := review123Run(t, 1, true, false, func() *limit.Limiter { return limit.NewFixed(6, limit.MaxWaiting(1)) })
	if len(h) > len(p) {
		t.Errorf("hedged failed %d, plain %d", len(h), len(p))
	}
}

// Hedging with a concurrency limit fails no more calls, and no call that
// completes without it, over random schedules in six limits (queues,
// MaxWaiting, OldestOnTime), with Do and DoStream: the hedges it stops
// to give their slots to the calls' first attempts are many (logged).
func TestReview123HedgingFailsNoMoreCalls(t *testing.T) {
	seeds := uint64(300)
	if raceEnabled {
		seeds = 30
	}
	mks := map[string]func() *limit.Limiter{
		"fixed4":       func() *limit.Limiter { return limit.NewFixed(4) },
		"fixed6w1":     func() *limit.Limiter { return limit.NewFixed(6, limit.MaxWaiting(1)) },
		"fixed8w2oot":  func() *limit.Limiter { return limit.NewFixed(8, limit.MaxWaiting(2), limit.OldestOnTime()) },
		"fixed5":       func() *limit.Limiter { return limit.NewFixed(5) },
		"fixed10w3":    func() *limit.Limiter { return limit.NewFixed(10, limit.MaxWaiting(3)) },
		"fixed12w1oot": func() *limit.Limiter { return limit.NewFixed(12, limit.MaxWaiting(1), limit.OldestOnTime()) },
	}
	bad := 0
	for name, mk := range mks {
		for _, stream := range []bool{false, true} {
			for seed := range seeds {
				plain, _ := review123Run(t, seed, false, stream, mk)
				hed, _ := review123Run(t, seed, true, stream, mk)
				if len(hed) > len(plain) {
					t.Errorf("%s stream=%v seed %d: hedged failed %d calls, plain %d", name, stream, seed, len(hed), len(plain))
				}
				if len(plain) > 0 {
					continue
				}
				for i, err := range hed {
					if _, ok := plain[i]; !ok {
						bad++
						if bad < 10 {
							t.Errorf("%s stream=%v seed %d: call %d failed with hedging (%v), completed without (plain failed %d, hedged failed %d)", name, stream, seed, i, err, len(plain), len(hed))
						}
					}
				}
			}
		}
	}
	t.Logf("attempts cut before their answer was due: %d", review123Cut.Load())
}

// An AIMD limit that falls as attempts fail, with hedges stopped and
// heirs waiting: every slot and every waiter is gone once the calls are.
func TestReview123AIMDNoDrift(t *testing.T) {
	review123FailEvery = 5
	defer func() { review123FailEvery = 0 }()
	for seed := uint64(0); seed < 200; seed++ {
		for _, stream := range []bool{false, true} {
			_, lim := review123Run(t, seed, true, stream, func() *limit.Limiter {
				return limit.NewAIMD(limit.Initial(8), limit.Min(1), limit.Max(16), limit.MaxWaiting(int(seed%3)), limit.Backoff(0.5))
			})
			if lim.InFlight() != 0 || lim.Waiting() != 0 {
				t.Fatalf("seed %d: inFlight=%d waiting=%d", seed, lim.InFlight(), lim.Waiting())
			}
		}
	}
}
