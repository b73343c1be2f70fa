package pipeline_test

import (
	"context"
	"errors"
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
	"github.com/resiliencekit/resiliencekit/resilience"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

var review120Transient = errors.New("review120 transient")

type review120Live struct {
	mu   sync.Mutex
	ctxs map[*context.Context]struct{}
	max  int
}

// enter registers ctx and returns how many registered ops still have a
// live context (each such op holds a slot of its own).
func (lv *review120Live) enter(ctx *context.Context) int {
	lv.mu.Lock()
	defer lv.mu.Unlock()
	lv.ctxs[ctx] = struct{}{}
	n := 0
	for c := range lv.ctxs {
		if (*c).Err() == nil {
			n++
		}
	}
	lv.max = max(lv.max, n)
	return n
}

func (lv *review120Live) leave(ctx *context.Context) {
	lv.mu.Lock()
	delete(lv.ctxs, ctx)
	lv.mu.Unlock()
}

// With as many callers as the limit's slots, and no queue, a plain
// pipeline (no hedging) never refuses an attempt. With hedging, whatever
// MaxExtra, no call may fail with the limit's refusal (or errYielded),
// every call returns a result of its own, and the limiter's count comes
// back to 0.
func TestReview120NoRefusalWithCallersEqualToLimit(t *testing.T) {
	for _, L := range []int{4, 5, 8} {
		for extra := 1; extra <= 5; extra++ {
			for _, stream := range []bool{false, true} {
				t.Run(fmt.Sprintf("L%d_extra%d_stream%v", L, extra, stream), func(t *testing.T) {
					synctest.Test(t, func(t *testing.T) {
						review120Stress(t, L, extra, stream)
					})
				})
			}
		}
	}
}

func review120Stress(t *testing.T, L, extra int, stream bool) {
	l := limit.NewFixed(L)
	var hedged atomic.Int32
	p := pipeline.New(pipeline.WithLimit(l), pipeline.WithListener(resilience.ListenerFunc(func(e resilience.Event) {
		if e.Kind == resilience.EventHedged {
			hedged.Add(1)
		}
	})),
		pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(6), retrypolicy.BaseDelay(time.Millisecond), retrypolicy.MaxDelay(2*time.Millisecond))),
		pipeline.WithHedging(hedge.New(hedge.Delay(5*time.Millisecond), hedge.MaxExtra(extra), hedge.MaxShare(1))))
	lv := &review120Live{ctxs: map[*context.Context]struct{}{}}
	var overLimit atomic.Int32
	var wg sync.WaitGroup
	var bad, canceledStream atomic.Int32
	for caller := range L {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(caller), uint64(L*10+extra)))
			var mu sync.Mutex
			for i := range 200 {
				want := caller*1000 + i
				mu.Lock()
				idle := time.Duration(rng.IntN(40)) * time.Millisecond
				mu.Unlock()
				time.Sleep(idle)
				op := func(ctx context.Context) (review120Stream, error) {
					mu.Lock()
					x := rng.IntN(100)
					d := time.Duration(1+rng.IntN(80)) * time.Millisecond
					mu.Unlock()
					if n := lv.enter(&ctx); n > L {
						overLimit.Add(1)
					}
					defer lv.leave(&ctx)
					switch {
					case x < 60:
						time.Sleep(time.Millisecond)
					case x < 80:
						select {
						case <-ctx.Done():
							return review120Stream{}, ctx.Err()
						case <-time.After(d):
						}
					case x < 90:
						time.Sleep(2 * time.Millisecond)
						return review120Stream{}, review120Transient
					default: // an answer that ignores cancellation
						time.Sleep(d)
					}
					return review120Stream{ctx, fmt.Sprint(want)}, nil
				}
				var s review120Stream
				var err error
				if stream {
					var rel func()
					s, rel, err = pipeline.DoStream(context.Background(), p, op)
					if err == nil && s.ctx.Err() != nil {
						canceledStream.Add(1)
					}
					rel()
				} else {
					s, err = pipeline.Do(context.Background(), p, op)
				}
				switch {
				case err == nil && s.who != fmt.Sprint(want):
					bad.Add(1)
					t.Errorf("caller %d call %d: result %q, want %d", caller, i, s.who, want)
				case err != nil && !errors.Is(err, review120Transient):
					bad.Add(1)
					t.Errorf("caller %d call %d: %v (limited %v)", caller, i, err, errors.Is(err, limit.ErrLimited))
				}
			}
		}()
	}
	wg.Wait()
	synctest.Wait()
	time.Sleep(time.Second)
	synctest.Wait()
	t.Logf("hedges %d", hedged.Load())
	if n := l.InFlight(); n != 0 {
		t.Errorf("InFlight %d at the end, want 0", n)
	}
	if n := overLimit.Load(); n > 0 {
		t.Errorf("%d times more ops with a live context than the limit", n)
	}
	if n := canceledStream.Load(); n > 0 {
		t.Errorf("%d streamed successes returned with their context already canceled", n)
	}
}
