package pipeline_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/resiliencekit/resiliencekit/hedge"
	"github.com/resiliencekit/resiliencekit/limit"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

type r124Body struct {
	n      int32
	ctx    context.Context
	closed atomic.Bool
}

// DoStream hedged: the winner's context (its "body") stays alive until
// release, every loser's is canceled and, with Discard, its body closed.
func TestR124StreamHedged(t *testing.T) {
	type beh func(ctx context.Context, n int32) error // nil: success after the sleep
	cases := []struct {
		name    string
		timeout bool
		op      func(ctx context.Context, n int32) (time.Duration, error)
		winner  int32
	}{
		{"hedge wins", false, func(ctx context.Context, n int32) (time.Duration, error) {
			if n == 1 {
				return time.Hour, nil
			}
			return time.Millisecond, nil
		}, 2},
		{"first wins", false, func(ctx context.Context, n int32) (time.Duration, error) {
			if n == 1 {
				return 15 * time.Millisecond, nil
			}
			return time.Hour, nil
		}, 1},
		{"first fails then hedge wins", false, func(ctx context.Context, n int32) (time.Duration, error) {
			if n == 1 {
				return 15 * time.Millisecond, errors.New("503")
			}
			return 20 * time.Millisecond, nil
		}, 2},
		{"hedge wins, attempt timeout", true, func(ctx context.Context, n int32) (time.Duration, error) {
			if n == 1 {
				return time.Hour, nil
			}
			return time.Millisecond, nil
		}, 2},
		{"first wins, attempt timeout", true, func(ctx context.Context, n int32) (time.Duration, error) {
			if n == 1 {
				return 15 * time.Millisecond, nil
			}
			return time.Hour, nil
		}, 1},
		{"second hedge wins", false, func(ctx context.Context, n int32) (time.Duration, error) {
			if n == 3 {
				return time.Millisecond, nil
			}
			return time.Hour, nil
		}, 3},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				opts := []pipeline.Option{
					pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(3), retrypolicy.BaseDelay(time.Millisecond))),
					pipeline.WithHedging(hedge.New(hedge.Delay(10*time.Millisecond), hedge.MaxShare(1), hedge.MaxExtra(3))),
				}
				if tc.timeout {
					opts = append(opts, pipeline.WithAttemptTimeout(2*time.Hour))
				}
				p := pipeline.New(opts...)
				var n atomic.Int32
				var mu sync.Mutex
				var all []*r124Body
				res, release, err := pipeline.DoStream(context.Background(), p, func(ctx context.Context) (*r124Body, error) {
					b := &r124Body{n: n.Add(1), ctx: ctx}
					mu.Lock()
					all = append(all, b)
					mu.Unlock()
					d, e := tc.op(ctx, b.n)
					select {
					case <-time.After(d):
					case <-ctx.Done():
						return b, ctx.Err()
					}
					return b, e
				}, pipeline.Discard(func(b *r124Body) {
					if b != nil {
						b.closed.Store(true)
					}
				}))
				if err != nil {
					t.Fatal(err)
				}
				if res.n != tc.winner {
					t.Fatalf("winner %d, want %d", res.n, tc.winner)
				}
				time.Sleep(time.Minute)
				synctest.Wait()
				if res.ctx.Err() != nil {
					t.Errorf("winner's context canceled before release: %v", context.Cause(res.ctx))
				}
				if res.closed.Load() {
					t.Errorf("winner's body discarded")
				}
				mu.Lock()
				for _, b := range all {
					if b != res && b.ctx.Err() == nil {
						t.Errorf("loser %d's context alive", b.n)
					}
					if b != res && !b.closed.Load() && b.n != 1 {
						// the first attempt, failed, is returned as an error, not disposed
						t.Logf("loser %d not discarded", b.n)
					}
				}
				mu.Unlock()
				release()
				synctest.Wait()
				if res.ctx.Err() == nil {
					t.Errorf("winner's context alive after release")
				}
			})
		})
	}
}

// Hedging with a limit large enough: no call fails that would succeed
// without hedging, under a burst with slow first attempts.
func TestR124BurstLimitNoHarm(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := limit.NewFixed(8)
		p := pipeline.New(pipeline.WithLimit(l),
			pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(2), retrypolicy.BaseDelay(time.Millisecond))),
			pipeline.WithHedging(hedge.New(hedge.Delay(5*time.Millisecond), hedge.MaxShare(1), hedge.MaxExtra(3))))
		var wg sync.WaitGroup
		var fails atomic.Int32
		var k atomic.Int32
		for range 8 {
			wg.Go(func() {
				_, err := pipeline.Do(context.Background(), p, func(ctx context.Context) (int, error) {
					d := 20 * time.Millisecond
					if k.Add(1)%3 == 0 {
						d = time.Millisecond
					}
					select {
					case <-time.After(d):
						return 1, nil
					case <-ctx.Done():
						return 0, ctx.Err()
					}
				})
				if err != nil {
					fails.Add(1)
					t.Log(err)
				}
			})
		}
		wg.Wait()
		if fails.Load() != 0 {
			t.Errorf("%d of 8 calls failed", fails.Load())
		}
	})
}
