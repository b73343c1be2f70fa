package pipeline_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/hedge"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/resilience"
)

type review46NopTracer struct{ spans atomic.Int32 }

func (t *review46NopTracer) StartCall(ctx context.Context, _ string) (context.Context, resilience.CallTrace) {
	return ctx, review46NopTrace{t}
}

type review46NopTrace struct{ t *review46NopTracer }

func (tr review46NopTrace) StartAttempt(ctx context.Context, _ resilience.AttemptInfo) (context.Context, func(error)) {
	tr.t.spans.Add(1)
	return ctx, func(error) {}
}
func (review46NopTrace) End(error) {}

// EventHedged: "attempt Attempt was sent as a hedge". A listener slow to take
// EventHedged, while the first attempt wins, with a tracer: the hedge is
// reported, then not sent (its call has returned: review140), as
// EventHedged's doc says.
func TestReview46_HedgedEventForHedgeNotSent(t *testing.T) {
	var hedgedEvents, hedgeCalls atomic.Int32
	tr := new(review46NopTracer)
	p := pipeline.New(
		pipeline.WithHedging(hedge.New(hedge.Delay(10*time.Millisecond), hedge.MaxShare(1))),
		pipeline.WithTracer(tr),
		pipeline.WithListener(resilience.ListenerFunc(func(e resilience.Event) {
			if e.Kind == resilience.EventHedged {
				hedgedEvents.Add(1)
				time.Sleep(30 * time.Millisecond) // a slow listener
			}
		})),
	)
	var p2 *pipeline.Pipeline = p
	res, err := pipeline.Do(context.Background(), p, func(ctx context.Context) (int, error) {
		if p2.IsHedge(ctx) {
			hedgeCalls.Add(1)
			return 2, nil
		}
		time.Sleep(15 * time.Millisecond)
		return 1, nil
	})
	time.Sleep(60 * time.Millisecond)
	t.Logf("res=%d err=%v EventHedged=%d hedge operations=%d attempt spans=%d", res, err, hedgedEvents.Load(), hedgeCalls.Load(), tr.spans.Load())
	if hedgedEvents.Load() != 1 || hedgeCalls.Load() != 0 {
		t.Errorf("EventHedged told %d hedges, %d sent; want 1 told, none sent after its call returned", hedgedEvents.Load(), hedgeCalls.Load())
	}
}

// No hedge once the breaker opened: a hedge fired, and the breaker opens
// (another call's failures) before the hedge passes the gates.
func TestReview46_NoHedgeAfterBreakerOpened(t *testing.T) {
	b := breaker.New("r46b", breaker.ConsecutiveFailures(1))
	var hedgedEvents, hedgeCalls atomic.Int32
	p := pipeline.New(
		pipeline.WithHedging(hedge.New(hedge.Delay(10*time.Millisecond), hedge.MaxExtra(3), hedge.MaxShare(1))),
		pipeline.WithBreaker(b),
		pipeline.WithListener(resilience.ListenerFunc(func(e resilience.Event) {
			if e.Kind == resilience.EventHedged {
				hedgedEvents.Add(1)
			}
		})),
	)
	opened := make(chan struct{})
	go func() {
		time.Sleep(15 * time.Millisecond)
		_, _ = pipeline.Do(context.Background(), p, func(ctx context.Context) (int, error) {
			return 0, resilience.Terminal(errors.New("down"))
		}, pipeline.SingleAttempt())
		close(opened)
	}()
	_, err := pipeline.Do(context.Background(), p, func(ctx context.Context) (int, error) {
		if p.IsHedge(ctx) {
			hedgeCalls.Add(1)
		}
		select {
		case <-time.After(60 * time.Millisecond):
		case <-ctx.Done():
			return 0, ctx.Err()
		}
		return 1, nil
	})
	<-opened
	t.Logf("err=%v state=%v EventHedged=%d hedges=%d", err, b.State(), hedgedEvents.Load(), hedgeCalls.Load())
	if hedgedEvents.Load() > 1 || hedgeCalls.Load() > 1 {
		t.Errorf("hedges sent after the breaker opened")
	}
}

// A hedge that fails with an error not retried stops the hedges after it,
// and the first attempt's later success is still the answer.
func TestReview46_PermanentHedgeStopsNextButFirstWins(t *testing.T) {
	if raceEnabled {
		t.Skip("real-time order of a hedge's failure and the next hedge's delay: under the race detector on 2 cores the failure can come after the next hedge is due (1 of 4 in CI); .ci/run runs it without")
	}
	for _, class := range []func(error) error{resilience.Permanent, resilience.Terminal, resilience.Rejected, func(error) error { return context.Canceled }} {
		var n, hedgedEvents atomic.Int32
		var discarded atomic.Int32
		p := pipeline.New(
			pipeline.WithHedging(hedge.New(hedge.Delay(10*time.Millisecond), hedge.MaxExtra(4), hedge.MaxShare(1))),
			pipeline.WithListener(resilience.ListenerFunc(func(e resilience.Event) {
				if e.Kind == resilience.EventHedged {
					hedgedEvents.Add(1)
				}
			})),
		)
		res, err := pipeline.Do(context.Background(), p, func(ctx context.Context) (int, error) {
			switch n.Add(1) {
			case 1:
				time.Sleep(60 * time.Millisecond)
				return 1, nil
			case 2:
				time.Sleep(3 * time.Millisecond)
				return 2, class(errors.New("no"))
			default:
				return 3, nil
			}
		}, pipeline.Discard(func(int) { discarded.Add(1) }))
		time.Sleep(20 * time.Millisecond)
		t.Logf("res=%d err=%v attempts=%d EventHedged=%d discarded=%d", res, err, n.Load(), hedgedEvents.Load(), discarded.Load())
		if res != 1 || err != nil || n.Load() != 2 || hedgedEvents.Load() != 1 || discarded.Load() != 1 {
			t.Errorf("want the first's success, 2 attempts, 1 hedge told, 1 discarded")
		}
	}
}
