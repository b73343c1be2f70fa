package pipeline_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/resiliencekit/resiliencekit/hedge"
	"github.com/resiliencekit/resiliencekit/limit"
	"github.com/resiliencekit/resiliencekit/pipeline"
)

// An heir waits only for the hedge it stopped: slots that free meanwhile
// go to others (or stay free), and the heir runs out of time while the
// limit is almost empty. A plain client (or the same pipeline without
// hedging) completes the call.
func TestReview121HeirIgnoresFreedSlots(t *testing.T) {
	for _, hedged := range []bool{false, true} {
		for _, waiting := range []int{0, 10} {
			t.Run(fmt.Sprint("hedged", hedged, "/MaxWaiting", waiting), func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					l := limit.NewFixed(4, limit.MaxWaiting(waiting))
					var p *pipeline.Pipeline
					var h *hedge.Policy
					if hedged {
						h = hedge.New(hedge.Delay(10*time.Millisecond), hedge.MaxShare(1))
					}
					p = pipeline.New(pipeline.WithLimit(l), pipeline.WithHedging(h))
					ctx := context.Background()
					var wg sync.WaitGroup
					// Call A: its first attempt answers at 100 ms; its hedge (sent
					// at 10 ms) is slow to notice its cancellation: 2 s.
					wg.Go(func() {
						pipeline.Do(ctx, p, func(ctx context.Context) (int, error) {
							if p.IsHedge(ctx) {
								time.Sleep(2 * time.Second)
								return 0, ctx.Err()
							}
							time.Sleep(100 * time.Millisecond)
							return 1, nil
						})
					})
					time.Sleep(15 * time.Millisecond)
					if n := l.InFlight(); hedged && n != 2 {
						t.Fatalf("in flight %d, want 2 (A and its hedge)", n)
					}
					// B and C fill the limit until 50 ms.
					for range 2 {
						wg.Go(func() {
							pipeline.Do(ctx, p, func(ctx context.Context) (int, error) {
								time.Sleep(35 * time.Millisecond)
								return 1, nil
							})
						})
					}
					time.Sleep(time.Millisecond)
					// D comes with a 500 ms budget and finds the limit full.
					dctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
					defer cancel()
					_, err := pipeline.Do(dctx, p, func(ctx context.Context) (int, error) {
						time.Sleep(time.Millisecond)
						return 1, nil
					})
					freeAt := l.InFlight()
					t.Logf("MaxWaiting(%d): D: %v, in flight %d, waiting %d", waiting, err, freeAt, l.Waiting())
					wg.Wait()
					time.Sleep(3 * time.Second) // the hedge's goroutine ends
					if err != nil {
						t.Errorf("MaxWaiting(%d): D failed with %v (limited: %v) with %d of 4 slots in flight as it gave up; hedged %v; without hedging it completes",
							waiting, err, errors.Is(err, limit.ErrLimited), freeAt, hedged)
					}
				})
			})
		}
	}
}

// The same with a hedge that heeds its context, but whose cancellation
// takes 50 ms to come back (a driver's cancel round trip, a connection
// torn down): D, with a 30 ms budget, fails while the limit has had free
// slots for most of it.
func TestReview121HeirSlowCancel(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := limit.NewFixed(4)
		var p *pipeline.Pipeline
		p = pipeline.New(pipeline.WithLimit(l),
			pipeline.WithHedging(hedge.New(hedge.Delay(10*time.Millisecond), hedge.MaxShare(1))))
		ctx := context.Background()
		var wg sync.WaitGroup
		wg.Go(func() {
			pipeline.Do(ctx, p, func(ctx context.Context) (int, error) {
				if p.IsHedge(ctx) {
					<-ctx.Done()
					time.Sleep(50 * time.Millisecond)
					return 0, ctx.Err()
				}
				time.Sleep(100 * time.Millisecond)
				return 1, nil
			})
		})
		time.Sleep(15 * time.Millisecond)
		for range 2 {
			wg.Go(func() {
				pipeline.Do(ctx, p, func(ctx context.Context) (int, error) {
					time.Sleep(5 * time.Millisecond)
					return 1, nil
				})
			})
		}
		time.Sleep(time.Millisecond)
		dctx, cancel := context.WithTimeout(ctx, 30*time.Millisecond)
		defer cancel()
		_, err := pipeline.Do(dctx, p, func(ctx context.Context) (int, error) { return 1, nil })
		wg.Wait()
		time.Sleep(time.Second)
		if err != nil {
			t.Errorf("D failed with %v; two of four slots were free from 5 ms into its 30 ms budget", err)
		}
	})
}
