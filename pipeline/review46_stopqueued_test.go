package pipeline_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/resiliencekit/resiliencekit/hedge"
	"github.com/resiliencekit/resiliencekit/limit"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/resilience"
)

// The first attempt fails with a Permanent error while a hedge waits in the
// limit's queue for the very slot the first attempt holds. The doc of
// WithHedging: "none is sent once ... an attempt failed with an error that is
// not retried".
func TestReview46_QueuedHedgeSentAfterFirstFailedPermanent(t *testing.T) {
	var hedgedEvents atomic.Int32
	var hedgeCalls atomic.Int32
	var firstFailedAt atomic.Int64
	var hedgeSentAfterFail atomic.Bool
	var bad int
	const calls = 60
	for i := 0; i < calls; i++ {
		firstFailedAt.Store(0)
		hedgeSentAfterFail.Store(false)
		p := pipeline.New(
			pipeline.WithHedging(hedge.New(hedge.Delay(20*time.Millisecond), hedge.MaxShare(1))),
			pipeline.WithLimit(limit.NewFixed(1, limit.MaxWaiting(4))),
			pipeline.WithListener(resilience.ListenerFunc(func(e resilience.Event) {
				if e.Kind == resilience.EventHedged {
					hedgedEvents.Add(1)
				}
			})),
		)
		_, err := pipeline.Do(context.Background(), p, func(ctx context.Context) (int, error) {
			if p.IsHedge(ctx) {
				hedgeCalls.Add(1)
				if firstFailedAt.Load() != 0 {
					hedgeSentAfterFail.Store(true)
				}
				<-ctx.Done()
				return 0, ctx.Err()
			}
			time.Sleep(25 * time.Millisecond)
			firstFailedAt.Store(time.Now().UnixNano())
			return 0, resilience.Permanent(errors.New("400 bad request"))
		})
		if resilience.Classify(err) != resilience.ClassPermanent {
			t.Fatalf("err = %v", err)
		}
		time.Sleep(5 * time.Millisecond)
		if hedgeSentAfterFail.Load() {
			bad++
		}
	}
	t.Logf("%d of %d calls sent their hedge after the first attempt failed Permanent; hedge op calls %d, EventHedged %d", bad, calls, hedgeCalls.Load(), hedgedEvents.Load())
	if bad != 0 {
		t.Errorf("a hedge was sent after the first attempt failed with a Permanent error in %d of %d calls", bad, calls)
	}
}

// Hedge 2 fails with a Permanent error while hedge 3 waits in the limit's
// queue; hedge 3 is then sent.
func TestReview46_QueuedHedgeSentAfterHedgeFailedPermanent(t *testing.T) {
	var hedgeFailed atomic.Bool
	var sentAfter atomic.Int32
	var mu sync.Mutex
	var events []resilience.Event
	p := pipeline.New(
		pipeline.WithHedging(hedge.New(hedge.Delay(20*time.Millisecond), hedge.MaxExtra(2), hedge.MaxShare(1))),
		pipeline.WithLimit(limit.NewFixed(2, limit.MaxWaiting(4))),
		pipeline.WithListener(resilience.ListenerFunc(func(e resilience.Event) {
			mu.Lock()
			events = append(events, e)
			mu.Unlock()
		})),
	)
	var n atomic.Int32
	res, err := pipeline.Do(context.Background(), p, func(ctx context.Context) (int, error) {
		switch n.Add(1) {
		case 1: // first: slow, then succeeds
			select {
			case <-time.After(150 * time.Millisecond):
				return 1, nil
			case <-ctx.Done():
				return 0, ctx.Err()
			}
		case 2: // hedge 2: fails Permanent at ~60ms, after hedge 3 queued at ~40ms
			time.Sleep(40 * time.Millisecond)
			hedgeFailed.Store(true)
			return 0, resilience.Permanent(errors.New("409 conflict"))
		default:
			if hedgeFailed.Load() {
				sentAfter.Add(1)
			}
			<-ctx.Done()
			return 0, ctx.Err()
		}
	})
	t.Logf("res=%d err=%v", res, err)
	time.Sleep(30 * time.Millisecond)
	mu.Lock()
	for _, e := range events {
		t.Logf("event %v attempt=%d err=%v", e.Kind, e.Attempt, e.Err)
	}
	mu.Unlock()
	if sentAfter.Load() != 0 {
		t.Errorf("hedge 3 was sent after hedge 2 failed with a Permanent error (%d)", sentAfter.Load())
	}
}

type review46SlowEndTracer struct{ d time.Duration }

func (t review46SlowEndTracer) StartCall(ctx context.Context, _ string) (context.Context, resilience.CallTrace) {
	return ctx, review46SlowEndTrace(t)
}

type review46SlowEndTrace struct{ d time.Duration }

func (t review46SlowEndTrace) StartAttempt(ctx context.Context, _ resilience.AttemptInfo) (context.Context, func(error)) {
	return ctx, func(error) { time.Sleep(t.d) } // a span end that takes a while (an exporter's)
}
func (review46SlowEndTrace) End(error) {}

// As above, with a tracer whose attempt span end takes 5 ms: the first
// attempt's limit slot is given back before its span ends, and the hedge
// queued for it is sent before the caller settles the race.
func TestReview46_QueuedHedgeSentAfterFirstFailedPermanentTracer(t *testing.T) {
	var bad, hedgeCalls int
	const calls = 20
	for i := 0; i < calls; i++ {
		var failed, after atomic.Bool
		var events atomic.Int32
		p := pipeline.New(
			pipeline.WithHedging(hedge.New(hedge.Delay(10*time.Millisecond), hedge.MaxShare(1))),
			pipeline.WithLimit(limit.NewFixed(1, limit.MaxWaiting(4))),
			pipeline.WithTracer(review46SlowEndTracer{5 * time.Millisecond}),
			pipeline.WithListener(resilience.ListenerFunc(func(e resilience.Event) {
				if e.Kind == resilience.EventHedged {
					events.Add(1)
				}
			})),
		)
		_, err := pipeline.Do(context.Background(), p, func(ctx context.Context) (int, error) {
			if p.IsHedge(ctx) {
				hedgeCalls++
				after.Store(failed.Load())
				<-ctx.Done()
				return 0, ctx.Err()
			}
			time.Sleep(25 * time.Millisecond)
			failed.Store(true)
			return 0, resilience.Permanent(errors.New("400 bad request"))
		})
		if resilience.Classify(err) != resilience.ClassPermanent {
			t.Fatalf("err = %v", err)
		}
		time.Sleep(10 * time.Millisecond)
		if after.Load() {
			bad++
		}
	}
	t.Logf("%d of %d calls sent a hedge after their first attempt failed Permanent", bad, calls)
	if bad != 0 {
		t.Errorf("a hedge was sent after the first attempt failed with a Permanent error in %d of %d calls", bad, calls)
	}
}
