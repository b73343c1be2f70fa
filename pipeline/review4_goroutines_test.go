package pipeline

import (
	"context"
	"runtime/metrics"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/resiliencekit/resiliencekit/hedge"
)

const review4G = 8 // callers, each calling every 8ms: ~1000 calls/s in all

func review4Created() uint64 {
	s := []metrics.Sample{{Name: "/sched/goroutines-created:goroutines"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// Issue 28: "Hedging that never fires ... 0 goroutines per call". Calls
// that answer in a tenth of the delay never hedge, but in a design since
// taken out, each of the hedge timer's 8 shards' timers, left set as races answer, fires once a delay, on a
// goroutine of its own (time.AfterFunc), finds nothing due and is set
// again for the next race: goroutines per call, 8 times the one timer's.
func TestReview4NeverFiringHedgeGoroutinesPerCall(t *testing.T) {
	const delay = 10 * time.Millisecond // calls come every ~1ms: ~1000/s, each answering at once
	p := New(WithHedging(hedge.New(hedge.Delay(delay), hedge.MaxShare(1))))
	var hedges atomic.Int32
	op := func(ctx context.Context) (int, error) {
		if p.IsHedge(ctx) {
			hedges.Add(1)
		}
		time.Sleep(4 * time.Millisecond) // answers in 0.4 delays: races overlap, spread over the shards
		return 1, nil
	}
	var calls atomic.Int64
	stop := time.Now().Add(time.Second)
	before := review4Created()
	var wg sync.WaitGroup
	for range review4G {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(stop) {
				_, _ = Do(context.Background(), p, op)
				calls.Add(1)
				time.Sleep(4 * time.Millisecond)
			}
		}()
	}
	wg.Wait()
	created := review4Created() - before - review4G
	per := float64(created) / float64(calls.Load())
	t.Logf("%d calls, %d hedges, %d goroutines created (%.3f per call)", calls.Load(), hedges.Load(), created, per)
	// Each hedge sent may account for a few (its own, the drain of the
	// losers', a timer fire); the rest are the timers' fires, which the
	// pipeline's one timer keeps to one per delay: 100 in this second.
	idle := int64(created) - 3*int64(hedges.Load())
	if bound := int64(1.5 * float64(time.Second) / float64(delay)); idle > bound {
		t.Errorf("%d hedges sent, yet %d goroutines made (%.3f per call, where issue 28 wants 0): more than %d, one timer's fires each delay", hedges.Load(), created, per, bound)
	}
}
