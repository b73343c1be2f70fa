package breaker_test

import (
	"context"
	"errors"
	"math"
	"testing"
	"testing/synctest"
	"time"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/resilience"
)

func TestReviewHugeOpenTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := breaker.New("x", breaker.ConsecutiveFailures(1), breaker.OpenTimeout(math.MaxInt64))
		_ = b.Execute(context.Background(), func(context.Context) error { return errBoom })
		time.Sleep(100 * 365 * 24 * time.Hour)
		if b.State() != resilience.StateOpen {
			t.Errorf("state %v", b.State())
		}
		if s := b.Snapshot(); s.NextProbe <= 0 {
			t.Errorf("NextProbe %v", s.NextProbe)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
		defer cancel()
		err := b.Execute(ctx, func(context.Context) error { return nil })
		if w := b.Wait(ctx, err); !errors.Is(w, breaker.ErrOpen) {
			t.Errorf("Wait: %v", w)
		}
		// Without a deadline: waits until ctx ends, then gives up.
		ctx2, cancel2 := context.WithCancel(context.Background())
		done := make(chan error)
		go func() { done <- b.Wait(ctx2, err) }()
		time.Sleep(time.Hour)
		cancel2()
		if w := <-done; !errors.Is(w, breaker.ErrOpen) {
			t.Errorf("Wait without deadline: %v", w)
		}
	})
}

func TestReviewHugeHalfOpenRequests(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := breaker.New("x", breaker.ConsecutiveFailures(1), breaker.OpenTimeout(time.Second), breaker.HalfOpenRequests(math.MaxUint32))
		_ = b.Execute(context.Background(), func(context.Context) error { return errBoom })
		time.Sleep(2 * time.Second)
		for i := range 1000 {
			if err := b.Execute(context.Background(), func(context.Context) error { return nil }); err != nil {
				t.Fatalf("probe %d: %v", i, err)
			}
		}
		if b.State() != resilience.StateHalfOpen {
			t.Errorf("state %v", b.State())
		}
		_ = b.Execute(context.Background(), func(context.Context) error { return errBoom })
		if b.State() != resilience.StateOpen {
			t.Errorf("state %v", b.State())
		}
	})
}

// Window(100ms, 100): 1 ms buckets; failures spread over more than the
// window never make a run of 3 in it... but 3 within it do.
func TestReviewHundredBucketsEdges(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := breaker.New("x", breaker.ConsecutiveFailures(3), breaker.Window(100*time.Millisecond, 100), breaker.OpenTimeout(time.Second))
		fail := func() { _ = b.Execute(context.Background(), func(context.Context) error { return errBoom }) }
		fail()
		time.Sleep(60 * time.Millisecond)
		fail()
		time.Sleep(50 * time.Millisecond) // the first has left
		fail()
		if b.State() != resilience.StateClosed {
			t.Errorf("opened on failures spread over 110 ms: %+v", b.Counts())
		}
		if c := b.Counts(); c.ConsecutiveFailures != 2 || c.TotalFailures != 2 {
			t.Errorf("counts %+v", c)
		}
		time.Sleep(49 * time.Millisecond) // 99 ms after the second: still in
		fail()
		if b.State() != resilience.StateOpen {
			t.Errorf("not opened: %+v", b.Counts())
		}
	})
}

// Window(d, 1) clears every d: the boundary, as gobreaker's Interval
// (counts cleared once strictly more than d has passed).
func TestReviewOneBucketBoundary(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := breaker.New("x", breaker.ConsecutiveFailures(2), breaker.Window(time.Millisecond, 1), breaker.OpenTimeout(time.Second))
		fail := func() { _ = b.Execute(context.Background(), func(context.Context) error { return errBoom }) }
		fail()
		time.Sleep(time.Millisecond)
		fail()
		if b.State() != resilience.StateOpen {
			t.Errorf("at exactly d: %v %+v", b.State(), b.Counts())
		}
	})
}
