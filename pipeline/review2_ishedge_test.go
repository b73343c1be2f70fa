package pipeline_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/resiliencekit/resiliencekit/hedge"
	"github.com/resiliencekit/resiliencekit/pipeline"
)

// A call through p made from within a hedge of p (an operation that calls
// through its own pipeline again: a shared per-dependency pipeline used by
// a wrapper and by the client it wraps) has a first attempt that is not a
// hedge of that call; p.IsHedge says it is.
func TestReview2IsHedgeNestedSamePipeline(t *testing.T) {
	p := pipeline.New(pipeline.WithHedging(hedge.New(hedge.Delay(time.Millisecond), hedge.MaxShare(1), hedge.MaxExtra(1))))
	var mu sync.Mutex
	var innerFirst []bool
	first := true
	_, err := pipeline.Do(context.Background(), p, func(ctx context.Context) (int, error) {
		mu.Lock()
		isFirst := first
		first = false
		mu.Unlock()
		if isFirst { // the outer first attempt: slow, so that a hedge goes
			select {
			case <-ctx.Done():
				return 0, ctx.Err()
			case <-time.After(200 * time.Millisecond):
				return 1, nil
			}
		}
		// the outer hedge: makes a call of its own through p
		n := 0
		return pipeline.Do(ctx, p, func(ictx context.Context) (int, error) {
			mu.Lock()
			n++
			if n == 1 {
				innerFirst = append(innerFirst, p.IsHedge(ictx))
			}
			mu.Unlock()
			return 2, nil
		}, pipeline.SingleAttempt())
	})
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(innerFirst) == 0 {
		t.Fatal("no hedge was sent")
	}
	if innerFirst[0] {
		t.Errorf("the first (and only, SingleAttempt) attempt of a new call through p, made by p's hedge, is taken for a hedge by p.IsHedge")
	}
}

// A pipeline derived with With is another pipeline: the hedges of one are
// not the other's.
func TestReview2IsHedgeDerived(t *testing.T) {
	p := pipeline.New(pipeline.WithHedging(hedge.New(hedge.Delay(time.Millisecond), hedge.MaxShare(1), hedge.MaxExtra(1))))
	q := p.With(pipeline.WithName("q"))
	var mu sync.Mutex
	var sawP, sawQ bool
	_, err := pipeline.Do(context.Background(), q, func(ctx context.Context) (int, error) {
		mu.Lock()
		sawP = sawP || p.IsHedge(ctx)
		sawQ = sawQ || q.IsHedge(ctx)
		mu.Unlock()
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(20 * time.Millisecond):
			return 1, nil
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if sawP || !sawQ {
		t.Errorf("p.IsHedge %v (want false), q.IsHedge %v (want true)", sawP, sawQ)
	}
}
