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

// Five hedges, the third (attempt 4) cuts the first attempt short; the
// others fail, panic on their cancellation, or succeed after it. The call
// returns the cutter's answer, no panic reaches the caller, every other
// success is discarded (not the answer), and the limit's count comes back
// to 0.
func TestReview120CutterIsTheAnswer(t *testing.T) {
	for _, stream := range []bool{false, true} {
		synctest.Test(t, func(t *testing.T) {
			l := limit.NewFixed(20)
			p := pipeline.New(pipeline.WithLimit(l),
				pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(3))),
				pipeline.WithHedging(hedge.New(hedge.Delay(10*time.Millisecond), hedge.MaxExtra(5), hedge.MaxShare(1))))
			for range 10 { // budget for hedges: MaxShare counts calls
				pipeline.Do(context.Background(), p, func(context.Context) (int, error) { return 0, nil })
			}
			var n atomic.Int32
			op := func(ctx context.Context) (int, error) {
				k := n.Add(1)
				switch k {
				case 1: // slow
					<-ctx.Done()
					return 0, ctx.Err()
				case 2: // panics when canceled
					<-ctx.Done()
					panic("loser panics")
				case 3: // fails at once
					return 0, review120Transient
				case 4: // the cutter, at 45 ms
					time.Sleep(15 * time.Millisecond)
					return 4, nil
				case 5: // succeeds after the cut, ignoring its cancellation
					time.Sleep(10 * time.Millisecond)
					return 5, nil
				}
				return int(k), nil
			}
			var mu sync.Mutex
			var discarded []int
			disc := pipeline.Discard(func(v int) { mu.Lock(); discarded = append(discarded, v); mu.Unlock() })
			var res int
			var err error
			if stream {
				var rel func()
				res, rel, err = pipeline.DoStream(context.Background(), p, op, disc)
				rel()
			} else {
				res, err = pipeline.Do(context.Background(), p, op, disc)
			}
			time.Sleep(time.Second)
			synctest.Wait()
			if err != nil || res != 4 {
				t.Errorf("got %d, %v; want the cutter's 4", res, err)
			}
			mu.Lock()
			for _, d := range discarded {
				if d == 4 {
					t.Errorf("the answer was discarded")
				}
			}
			mu.Unlock()
			if l.InFlight() != 0 {
				t.Errorf("InFlight %d", l.InFlight())
			}
			t.Logf("attempts %d discarded %v", n.Load(), discarded)
		})
	}
}

// A hedge that the limit preempts after it got the dependency's answer not
// to retry (a 404: terminal) while the first attempt had failed with a
// transient error: the call's error must not be the limiter's.
func TestReview120YieldedTerminalAfterFirstFailed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := limit.NewFixed(4)
		p := pipeline.New(pipeline.WithLimit(l),
			pipeline.WithHedging(hedge.New(hedge.Delay(10*time.Millisecond), hedge.MaxShare(1))))
		var n atomic.Int32
		op := func(ctx context.Context) (int, error) {
			switch n.Add(1) {
			case 1:
				time.Sleep(20 * time.Millisecond)
				return 0, review120Transient
			case 2:
				<-ctx.Done()
				return 0, ctx.Err()
			}
			return 1, nil
		}
		done := make(chan error, 1)
		go func() {
			_, err := pipeline.Do(context.Background(), p, op)
			done <- err
		}()
		time.Sleep(25 * time.Millisecond)
		synctest.Wait()
		block := make(chan struct{})
		for range 4 {
			go pipeline.Do(context.Background(), pipeline.New(pipeline.WithLimit(l)), func(ctx context.Context) (int, error) { <-block; return 1, nil })
		}
		synctest.Wait()
		err := <-done
		if !errors.Is(err, review120Transient) || errors.Is(err, limit.ErrLimited) || !pipeline.Hedged(err) {
			t.Errorf("call's error %v, want the first attempt's transient error, hedged", err)
		}
		close(block)
	})
}
