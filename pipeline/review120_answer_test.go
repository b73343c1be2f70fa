package pipeline_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/resiliencekit/resiliencekit/hedge"
	"github.com/resiliencekit/resiliencekit/limit"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/resilience"
)

// The first attempt's operation fails with an error of class rejected of
// its own (an inner pipeline's throttle refused it) while the hedge is out;
// the hedge is then preempted by another call. The call's error should be
// the operation's, as without hedging: not errYielded, which says that
// this pipeline's limit refused it.
func TestReview120YieldedHedgeReplacesFirstAttemptsError(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		inner := errors.New("inner refusal")
		l := limit.NewFixed(4)
		p := pipeline.New(pipeline.WithLimit(l),
			pipeline.WithHedging(hedge.New(hedge.Delay(10*time.Millisecond), hedge.MaxShare(1))))
		var n atomic.Int32
		op := func(ctx context.Context) (int, error) {
			switch n.Add(1) {
			case 1:
				time.Sleep(20 * time.Millisecond)
				return 0, resilience.Rejected(inner)
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
		time.Sleep(25 * time.Millisecond) // the first attempt has returned; the hedge still runs
		synctest.Wait()
		block := make(chan struct{})
		for range 4 { // the fourth takes the hedge's slot
			go pipeline.Do(context.Background(), pipeline.New(pipeline.WithLimit(l)), func(ctx context.Context) (int, error) { <-block; return 1, nil })
		}
		synctest.Wait()
		err := <-done
		if !errors.Is(err, inner) {
			t.Errorf("call's error %v (ErrLimited %v), want the operation's %v", err, errors.Is(err, limit.ErrLimited), inner)
		}
		close(block)
	})
}

// The same with a hedge the limit refused at once (not a preemption): the
// call's error is the limit's refusal of a hedge, not its operation's.
func TestReview120RefusedHedgeReplacesFirstAttemptsError(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		inner := errors.New("inner refusal")
		l := limit.NewFixed(4)
		p := pipeline.New(pipeline.WithLimit(l),
			pipeline.WithHedging(hedge.New(hedge.Delay(10*time.Millisecond), hedge.MaxShare(1))))
		block := make(chan struct{})
		for range 2 {
			go pipeline.Do(context.Background(), pipeline.New(pipeline.WithLimit(l)), func(ctx context.Context) (int, error) { <-block; return 1, nil })
		}
		synctest.Wait()
		op := func(ctx context.Context) (int, error) {
			time.Sleep(20 * time.Millisecond)
			return 0, resilience.Rejected(inner)
		}
		_, err := pipeline.Do(context.Background(), p, op)
		if !errors.Is(err, inner) {
			t.Errorf("call's error %v (ErrLimited %v), want the operation's %v", err, errors.Is(err, limit.ErrLimited), inner)
		}
		close(block)
	})
}
