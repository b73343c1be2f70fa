package pipeline_test

import (
	"context"
	"errors"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/resiliencekit/resiliencekit/hedge"
	"github.com/resiliencekit/resiliencekit/limit"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/resilience"
)

// A listener that calls runtime.Goexit (or panics) as it hears of a
// hedge: the hedge runs on a goroutine of the pipeline's. Does the call
// hang, and does the concurrency limit lose a slot?
// A listener's Goexit ends the caller's goroutine, as an operation's does
// (mayEnd); a panic is logged, and the call goes on.
func r95HedgeListener(t *testing.T, kind resilience.EventKind, act func(), mayEnd bool) {
	l := resilience.ListenerFunc(func(e resilience.Event) {
		if e.Kind == kind {
			act()
		}
	})
	lim := limit.NewFixed(4)
	p := pipeline.New(pipeline.WithName("h"), pipeline.WithListener(l), pipeline.WithLimit(lim),
		pipeline.WithHedging(hedge.New(hedge.Delay(5*time.Millisecond), hedge.MaxShare(1))))
	done := make(chan struct{})
	go func() {
		defer close(done)
		returned := false
		defer func() {
			if !returned && !mayEnd {
				t.Errorf("kind %v: the caller's goroutine was ended by runtime.Goexit though its first attempt would have succeeded", kind)
			}
		}()
		defer func() { returned = returned || recover() != nil }()
		pipeline.Do(context.Background(), p, func(ctx context.Context) (int, error) {
			select {
			case <-ctx.Done():
				return 0, ctx.Err()
			case <-time.After(50 * time.Millisecond):
				return 1, nil
			}
		})
		returned = true
	}()
	select {
	case <-done:
	case <-time.After(3 * time.Second):
		t.Fatalf("kind %v: the call hung", kind)
	}
	time.Sleep(100 * time.Millisecond)
	if n := lim.InFlight(); n != 0 {
		t.Errorf("kind %v: %d concurrency slots held after the call returned", kind, n)
	}
}

func TestReview95HedgedListenerGoexit(t *testing.T) {
	r95HedgeListener(t, resilience.EventHedged, runtime.Goexit, true)
}

func TestReview95HedgedListenerPanic(t *testing.T) {
	r95HedgeListener(t, resilience.EventHedged, func() { panic("boom") }, false)
}

func TestReview95AttemptListenerGoexitLimit(t *testing.T) {
	l := resilience.ListenerFunc(func(e resilience.Event) {
		if e.Kind == resilience.EventAttempt {
			runtime.Goexit()
		}
	})
	lim := limit.NewFixed(1)
	p := pipeline.New(pipeline.WithName("g"), pipeline.WithListener(l), pipeline.WithLimit(lim))
	done := make(chan struct{})
	go func() {
		defer close(done)
		pipeline.Do(context.Background(), p, func(ctx context.Context) (int, error) { return 1, nil })
	}()
	<-done
	if n := lim.InFlight(); n != 0 {
		t.Errorf("%d slots held", n)
	}
}

// The first attempt fails while the hedge (whose listener called Goexit on
// its goroutine) is outstanding: does the call hang or lose the answer?
func TestReview95HedgedListenerGoexitFirstFails(t *testing.T) {
	l := resilience.ListenerFunc(func(e resilience.Event) {
		if e.Kind == resilience.EventHedged {
			runtime.Goexit()
		}
	})
	lim := limit.NewFixed(4)
	p := pipeline.New(pipeline.WithName("h2"), pipeline.WithListener(l), pipeline.WithLimit(lim),
		pipeline.WithHedging(hedge.New(hedge.Delay(5*time.Millisecond), hedge.MaxShare(1))))
	done := make(chan error, 1)
	go func() {
		returned := false
		defer func() {
			if !returned {
				done <- errors.New("ended by the listener's runtime.Goexit, passed on as an operation's is")
			}
		}()
		var n atomic.Int32
		_, err := pipeline.Do(context.Background(), p, func(ctx context.Context) (int, error) {
			if n.Add(1) == 1 {
				time.Sleep(30 * time.Millisecond)
				return 0, errors.New("first fails")
			}
			return 1, nil
		})
		returned = true
		done <- err
	}()
	select {
	case err := <-done:
		t.Logf("returned %v", err)
	case <-time.After(3 * time.Second):
		t.Fatal("the call hung")
	}
	time.Sleep(50 * time.Millisecond)
	if n := lim.InFlight(); n != 0 {
		t.Errorf("%d slots held", n)
	}
}

// Repeated: a listener that Goexits on each hedge exhausts the limit, and
// then calls to a healthy dependency are refused.
func TestReview95HedgedGoexitExhaustsLimit(t *testing.T) {
	l := resilience.ListenerFunc(func(e resilience.Event) {
		if e.Kind == resilience.EventHedged {
			runtime.Goexit()
		}
	})
	lim := limit.NewFixed(4)
	p := pipeline.New(pipeline.WithName("h3"), pipeline.WithListener(l), pipeline.WithLimit(lim),
		pipeline.WithHedging(hedge.New(hedge.Delay(time.Millisecond), hedge.MaxShare(1))))
	for range 10 {
		ch := make(chan struct{})
		go func() {
			defer close(ch)
			pipeline.Do(context.Background(), p, func(ctx context.Context) (int, error) {
				time.Sleep(5 * time.Millisecond)
				return 1, nil
			})
		}()
		<-ch
		t.Logf("in flight after call: %d", lim.InFlight())
	}
	if n := lim.InFlight(); n != 0 {
		t.Errorf("%d of %d slots held for good with nothing in flight", n, lim.Limit())
	}
	_, err := pipeline.Do(context.Background(), p, func(ctx context.Context) (int, error) { return 1, nil })
	if err != nil {
		t.Errorf("a healthy call after 10 hedged calls: %v (slots held %d of %d)", err, lim.InFlight(), lim.Limit())
	}
}
