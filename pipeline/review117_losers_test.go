package pipeline_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/resiliencekit/resiliencekit/hedge"
	"github.com/resiliencekit/resiliencekit/limit"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/resilience"
)

// A hedge that wins cancels the others at once: "the first success wins
// and the others are canceled". The first attempt ignores its context for
// a while (documented to hold the answer); hedge 2, which honours its
// context, should still be canceled as hedge 1 wins, not kept running
// (holding a slot of the concurrency limit) until the first returns.
func TestReview117WinningHedgeCancelsOtherHedgesAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lim := limit.NewFixed(10)
		p := pipeline.New(pipeline.WithLimit(lim),
			pipeline.WithHedging(hedge.New(hedge.Delay(10*time.Millisecond), hedge.MaxExtra(2), hedge.MaxShare(1))))
		start := time.Now()
		var hedge2End atomic.Int64
		var n atomic.Int64
		go pipeline.Do(context.Background(), p, func(ctx context.Context) (int, error) {
			switch n.Add(1) {
			case 1: // first: ignores its context for 200 ms
				time.Sleep(200 * time.Millisecond)
				return 1, ctx.Err()
			case 2: // hedge 1 at 10 ms: answers at 25 ms
				return 2, review117Sleep(ctx, 15*time.Millisecond)
			default: // hedge 2 at 20 ms: slow, honours its context
				err := review117Sleep(ctx, time.Second)
				hedge2End.Store(int64(time.Since(start)))
				return 3, err
			}
		})
		time.Sleep(100 * time.Millisecond)
		synctest.Wait()
		if n.Load() != 3 {
			t.Fatalf("%d attempts, want 3", n.Load())
		}
		if e := hedge2End.Load(); e == 0 {
			t.Errorf("at 100 ms, 75 ms after hedge 1 won, hedge 2 still runs (a slot held: InFlight %d)", lim.InFlight())
		}
		time.Sleep(2 * time.Second)
	})
}

// Each hedge sent is reported once as EventHedged, and only those sent.
type review117Counter struct {
	mu     sync.Mutex
	hedged int
}

func (c *review117Counter) OnEvent(e resilience.Event) {
	if e.Kind == resilience.EventHedged {
		c.mu.Lock()
		c.hedged++
		c.mu.Unlock()
	}
}

func TestReview117EventHedgedMatchesHedgesSent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var ev review117Counter
		lim := limit.NewFixed(6)
		p := pipeline.New(pipeline.WithLimit(lim), pipeline.WithListener(&ev),
			pipeline.WithHedging(hedge.New(hedge.Delay(5*time.Millisecond), hedge.MaxExtra(3), hedge.MaxShare(0.5))))
		var hedges atomic.Int64
		var wg sync.WaitGroup
		for i := range 40 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				time.Sleep(time.Duration(i) * time.Millisecond)
				pipeline.Do(context.Background(), p, func(ctx context.Context) (int, error) {
					if p.IsHedge(ctx) {
						hedges.Add(1)
					}
					return 1, review117Sleep(ctx, time.Duration(3+i%4*5)*time.Millisecond)
				})
			}()
		}
		wg.Wait()
		time.Sleep(time.Second)
		if int64(ev.hedged) != hedges.Load() {
			t.Errorf("EventHedged %d, hedges sent %d", ev.hedged, hedges.Load())
		}
		t.Logf("hedges %d", hedges.Load())
	})
}
