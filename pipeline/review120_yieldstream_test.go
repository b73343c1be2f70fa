package pipeline_test

import (
	"context"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/resiliencekit/resiliencekit/hedge"
	"github.com/resiliencekit/resiliencekit/limit"
	"github.com/resiliencekit/resiliencekit/pipeline"
)

type review120Stream struct {
	ctx context.Context
	who string
}

// A hedge whose slot another call's attempt takes over is canceled; if it
// still succeeds (its answer had come as the cancel came: an HTTP response
// whose headers were read), the call returns it, with DoStream, as its
// answer: a stream whose context is already canceled, so that its body
// cannot be read. Without hedging the first attempt would have answered.
// (The first attempt answers in 200 ms here: in review120's version it
// answered only when canceled, and the call, without hedging too, hung.)
func TestReview120YieldedHedgeSuccessStreamCanceled(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := limit.NewFixed(4)
		p := pipeline.New(pipeline.WithLimit(l),
			pipeline.WithHedging(hedge.New(hedge.Delay(10*time.Millisecond), hedge.MaxShare(1))))
		headers := make(chan struct{}) // the hedge's answer has come
		var n atomic.Int32
		op := func(ctx context.Context) (review120Stream, error) {
			switch n.Add(1) {
			case 1: // the first attempt: slow (as the dependency answers without hedging)
				select {
				case <-time.After(200 * time.Millisecond):
					return review120Stream{ctx, "first attempt"}, nil
				case <-ctx.Done():
					return review120Stream{}, ctx.Err()
				}
			case 2: // the hedge: its answer comes, and is returned whatever the context says
				<-headers
				return review120Stream{ctx, "hedge"}, nil
			}
			return review120Stream{}, nil
		}
		type ret struct {
			s   review120Stream
			rel func()
			err error
		}
		done := make(chan ret, 1)
		go func() {
			s, rel, err := pipeline.DoStream(context.Background(), p, op)
			done <- ret{s, rel, err}
		}()
		time.Sleep(15 * time.Millisecond)
		synctest.Wait()
		if got := l.InFlight(); got != 2 {
			t.Fatalf("InFlight %d, want 2 (first attempt and hedge)", got)
		}
		// Three other calls' attempts: the third finds the limit full and
		// takes the hedge's slot.
		block := make(chan struct{})
		other := func(ctx context.Context) (int, error) { <-block; return 1, nil }
		for range 3 {
			go func() {
				if _, err := pipeline.Do(context.Background(), pipeline.New(pipeline.WithLimit(l)), other); err != nil {
					t.Errorf("other call: %v", err)
				}
			}()
		}
		synctest.Wait()
		close(headers) // the hedge's answer, read as its context was canceled
		synctest.Wait()
		r := <-done
		if r.err != nil {
			t.Fatalf("call failed: %v", r.err)
		}
		if r.s.ctx != nil && r.s.ctx.Err() != nil {
			t.Errorf("DoStream returned the %s's result whose context is already canceled (%v) before release: its body cannot be read", r.s.who, r.s.ctx.Err())
		}
		r.rel()
		close(block)
		synctest.Wait()
		if got := l.InFlight(); got != 0 {
			t.Errorf("InFlight %d after all, want 0", got)
		}
	})
}
