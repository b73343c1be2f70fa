package pipeline

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/resiliencekit/resiliencekit/hedge"
	"go.uber.org/goleak"
)

// A streamed result's context must live until its release, however many
// later calls reuse the race it ran in; and be canceled by release.
func TestReview4StreamContextSurvivesRaceReuse(t *testing.T) {
	p := New(WithHedging(hedge.New(hedge.Delay(time.Hour))), WithTimeBudget(time.Minute))
	type held struct {
		ctx     context.Context
		release func()
	}
	var hs []held
	for range 100 {
		var got context.Context
		_, release, err := DoStream(context.Background(), p, func(ctx context.Context) (int, error) {
			got = ctx
			return 1, nil
		})
		if err != nil {
			t.Fatal(err)
		}
		hs = append(hs, held{got, release})
	}
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 1000 {
				_, _ = Do(context.Background(), p, func(ctx context.Context) (int, error) { return 0, nil })
				_, rel, _ := DoStream(context.Background(), p, func(ctx context.Context) (int, error) { return 0, nil })
				rel()
			}
		}()
	}
	wg.Wait()
	for i, h := range hs {
		if h.ctx.Err() != nil {
			t.Fatalf("stream %d: context ended before release: %v", i, h.ctx.Err())
		}
		h.release()
		if h.ctx.Err() == nil {
			t.Fatalf("stream %d: context alive after release", i)
		}
	}
}

// No goroutine is left once hedged calls, won and lost, have returned.
func TestReview4NoGoroutineLeftAfterHedges(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	const delay = time.Millisecond
	p := New(WithHedging(hedge.New(hedge.Delay(delay), hedge.MaxExtra(3), hedge.MaxShare(1))))
	var wg sync.WaitGroup
	for g := range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 40 {
				_, _ = Do(context.Background(), p, func(ctx context.Context) (int, error) {
					d := time.Duration((g*7+i*13)%5) * delay
					select {
					case <-time.After(d):
						return 1, nil
					case <-ctx.Done():
						return 0, ctx.Err()
					}
				})
			}
		}()
	}
	wg.Wait()
}
