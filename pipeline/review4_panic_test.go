package pipeline

import (
	"context"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/resiliencekit/resiliencekit/hedge"
)

// Panics and runtime.Goexit in first attempts and hedges, around the
// hedging delay, among ordinary calls reusing the memory of races that
// ended (the pipeline's spare; a sync.Pool in a design since taken out):
// every ordinary call gets its own answer.
func TestReview4PanicsAmongRaces(t *testing.T) {
	const delay = 200 * time.Microsecond
	p := New(WithHedging(hedge.New(hedge.Delay(delay), hedge.MaxExtra(2), hedge.MaxShare(1))))
	var wrong, panics, exits atomic.Int64
	var id atomic.Int64
	var wg sync.WaitGroup
	stop := time.Now().Add(2 * time.Second)
	for g := range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(g), 1))
			for time.Now().Before(stop) {
				me := id.Add(1)
				mode := rng.IntN(10) // 0: panic, 1: Goexit, else ordinary
				sleep := time.Duration(rng.Int64N(int64(2 * delay)))
				firstToo := rng.IntN(2) == 0
				done := make(chan struct{})
				go func() {
					defer close(done)
					defer func() {
						if recover() != nil {
							panics.Add(1)
						}
					}()
					res, err := Do(context.Background(), p, func(ctx context.Context) (int64, error) {
						hedgeAttempt := p.IsHedge(ctx)
						if !hedgeAttempt {
							select {
							case <-time.After(sleep):
							case <-ctx.Done():
								return 0, ctx.Err()
							}
						}
						switch {
						case mode == 0 && (hedgeAttempt || firstToo):
							panic("boom")
						case mode == 1:
							exits.Add(1)
							runtime.Goexit()
						}
						return me, nil
					})
					if mode > 1 && (err != nil || res != me) {
						wrong.Add(1)
					}
				}()
				<-done
			}
		}()
	}
	wg.Wait()
	t.Logf("panics %d, Goexits %d", panics.Load(), exits.Load())
	if wrong.Load() > 0 {
		t.Fatalf("%d ordinary calls got another call's answer or an error", wrong.Load())
	}
}
