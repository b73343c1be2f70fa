package pipeline

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/resiliencekit/resiliencekit/hedge"
)

// A race with MaxExtra(2) whose first hedge is out when its first attempt
// fails (retryably) goes on waiting for that hedge; its second hedge is
// still due one delay after the first, and must be sent: the race is not
// over (finish waits for the hedges out), and fire would send it. A
// design since taken out took the race out of the timer's heap before it
// looked at the attempts sent: with a hedge out (2 sent) it reported that
// the race was not alone, yet the entry it removed, the second hedge's,
// was gone, and the race waited for the slow first hedge alone
// (hedgeTimers.disarm now looks first).
func TestReview4SecondHedgeLostWhenFirstAttemptFails(t *testing.T) {
	const delay = 20 * time.Millisecond
	p := New(WithHedging(hedge.New(hedge.Delay(delay), hedge.MaxExtra(2), hedge.MaxShare(1))))
	var n atomic.Int32
	var hedged atomic.Int32
	errFirst := errors.New("first attempt: transient")
	start := time.Now()
	res, err := Do(context.Background(), p, func(ctx context.Context) (string, error) {
		switch n.Add(1) {
		case 1: // the first attempt fails between the first hedge and the second
			time.Sleep(delay + delay/2)
			return "", errFirst
		case 2: // the first hedge is slow
			hedged.Add(1)
			select {
			case <-time.After(time.Second):
				return "hedge 1", nil
			case <-ctx.Done():
				return "", ctx.Err()
			}
		default: // the second hedge answers at once
			hedged.Add(1)
			return "hedge 2", nil
		}
	})
	took := time.Since(start)
	if err != nil {
		t.Fatal(err)
	}
	if res != "hedge 2" || hedged.Load() != 2 {
		t.Fatalf("got %q after %v with %d hedges sent; want the second hedge's answer after ~%v (it was due at %v)", res, took.Round(time.Millisecond), hedged.Load(), 2*delay, 2*delay)
	}
}

// The same loss, as a failed call: without a retry stage, the call fails
// where the hedge due at 2x the delay, which the race no longer sends,
// would have succeeded.
func TestReview4LostHedgeFailsTheCall(t *testing.T) {
	const delay = 20 * time.Millisecond
	p := New(WithHedging(hedge.New(hedge.Delay(delay), hedge.MaxExtra(2), hedge.MaxShare(1))))
	var n atomic.Int32
	errTransient := errors.New("transient")
	res, err := Do(context.Background(), p, func(ctx context.Context) (string, error) {
		switch n.Add(1) {
		case 1: // first attempt: fails at 1.5 delays, with its first hedge out
			time.Sleep(delay + delay/2)
			return "", errTransient
		case 2: // first hedge: fails at 2.5 delays after it was sent
			time.Sleep(delay + delay/2)
			return "", errTransient
		default: // second hedge, due at 2 delays: succeeds
			return "ok", nil
		}
	})
	if err != nil || res != "ok" {
		t.Fatalf("got %q, %v after %d attempts; the second hedge, due while the first was out, was never sent", res, err, n.Load())
	}
}
