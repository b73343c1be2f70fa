package pipeline_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/resiliencekit/resiliencekit/hedge"
	"github.com/resiliencekit/resiliencekit/pipeline"
)

// Two hedges succeed at the same instant while the first attempt runs.
// The one that wins the CAS cancels the others (cutHedges), but the other
// success may reach the results channel first and be returned: a streamed
// result whose context is already canceled, before release.
func TestReview119CutHedgesKillsReturnedStream(t *testing.T) {
	bad, runs := 0, 2000
	for i := 0; i < runs; i++ {
		synctest.Test(t, func(t *testing.T) {
			p := pipeline.New(pipeline.WithHedging(hedge.New(hedge.Delay(10*time.Millisecond), hedge.MaxExtra(5), hedge.MaxShare(1))))
			var n atomic.Int32
			gate := make(chan struct{})
			time.AfterFunc(70*time.Millisecond, func() { close(gate) })
			res, release, err := pipeline.DoStream(context.Background(), p, func(ctx context.Context) (context.Context, error) {
				k := n.Add(1)
				if k == 1 { // the first attempt: hangs until canceled
					<-ctx.Done()
					return nil, ctx.Err()
				}
				// hedges sent at 10 ms and 20 ms both answer at 50 ms
				select {
				case <-gate:
				case <-ctx.Done():
					return nil, ctx.Err()
				}
				return ctx, nil
			})
			defer release()
			if err != nil {
				t.Errorf("run %d: err %v", i, err)
				return
			}
			if res.Err() != nil {
				bad++
			}
		})
	}
	if bad > 0 {
		t.Errorf("%d of %d runs returned a streamed success whose context was already canceled before release", bad, runs)
	}
}

// A loser hedge that panics as it is canceled by cutHedges, while the
// winner's success waits: the call must return the winner's success.
func TestReview119CutLoserPanicsOnCancel(t *testing.T) {
	panicked, runs := 0, 100
	for i := 0; i < runs; i++ {
		func() {
			defer func() {
				if recover() != nil {
					panicked++
				}
			}()
			synctest.Test(t, func(t *testing.T) {
				p := pipeline.New(pipeline.WithHedging(hedge.New(hedge.Delay(10*time.Millisecond), hedge.MaxExtra(2), hedge.MaxShare(1))))
				var n atomic.Int32
				res, err := pipeline.Do(context.Background(), p, func(ctx context.Context) (int, error) {
					k := n.Add(1)
					switch k {
					case 1: // first: hangs, returns late after its cancel
						<-ctx.Done()
						time.Sleep(100 * time.Millisecond)
						return 0, ctx.Err()
					case 2: // hedge 1 wins at 30 ms
						time.Sleep(20 * time.Millisecond)
						return 2, nil
					}
					<-ctx.Done() // hedge 2: canceled by the winner; a buggy op panics then
					panic(errors.New("op panics on cancel"))
				})
				if err != nil || res != 2 {
					t.Errorf("got %v, %v; want the winner's 2", res, err)
				}
			})
		}()
	}
	if panicked > 0 {
		t.Errorf("%d of %d calls panicked with a cancelled loser's panic instead of returning the winner's success", panicked, runs)
	}
}
