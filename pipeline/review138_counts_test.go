package pipeline_test

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/resiliencekit/resiliencekit/hedge"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/resilience"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

// A race that a hedge won is one attempt, a success, told once; with
// MaxExtra 3 and the first attempt stuck, at most 3 hedges are sent, and
// the caller gets the winner's result, not a loser's error.
func TestReview138RaceIsOneSuccess(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		var attempts []error
		hedges := 0
		p := pipeline.New(
			pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(3))),
			pipeline.WithHedging(hedge.New(hedge.Delay(10*time.Millisecond), hedge.MaxExtra(3), hedge.MaxShare(1))),
			pipeline.WithListener(resilience.ListenerFunc(func(e resilience.Event) {
				mu.Lock()
				defer mu.Unlock()
				switch e.Kind {
				case resilience.EventAttempt:
					attempts = append(attempts, e.Err)
				case resilience.EventHedged:
					hedges++
				}
			})),
		)
		for range 5 { // calls for MaxShare's budget: 5 calls, up to 6 hedges
			if _, err := pipeline.Do(context.Background(), p, func(context.Context) (int, error) { return 0, nil }); err != nil {
				t.Fatal(err)
			}
		}
		mu.Lock()
		attempts = nil
		mu.Unlock()
		var n atomic.Int32
		op := func(ctx context.Context) (int, error) {
			switch k := n.Add(1); k {
			case 1: // stuck until canceled, then says 503
				<-ctx.Done()
				return 0, errors.New("503 after cancel")
			case 2, 3: // hedges that fail fast... after a while
				time.Sleep(25 * time.Millisecond)
				return 0, errors.New("503")
			default:
				time.Sleep(5 * time.Millisecond)
				return int(k), nil
			}
		}
		res, err := pipeline.Do(context.Background(), p, op)
		time.Sleep(time.Second)
		synctest.Wait()
		if err != nil || res != 4 {
			t.Fatalf("got %d, %v; want the winner's 4", res, err)
		}
		mu.Lock()
		defer mu.Unlock()
		if len(attempts) != 1 || attempts[0] != nil {
			t.Errorf("attempts told %v, want one success", attempts)
		}
		if hedges != 3 {
			t.Errorf("%d hedges, want MaxExtra 3", hedges)
		}
	})
}

// The caller hangs up mid-race; the first attempt ignores its context for
// a while, one hedge panics and another calls runtime.Goexit after the call
// returned: every goroutine ends (synctest.Test fails on one left blocked),
// and the caller gets its cancellation.
func TestReview138HangUpThenTwinsPanic(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := pipeline.New(
			pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(3))),
			pipeline.WithHedging(hedge.New(hedge.Delay(10*time.Millisecond), hedge.MaxExtra(2), hedge.MaxShare(1))),
			pipeline.WithAttemptTimeout(time.Second),
			pipeline.WithTimeBudget(3*time.Second),
		)
		var n atomic.Int32
		op := func(ctx context.Context) (int, error) {
			switch n.Add(1) {
			case 1:
				time.Sleep(200 * time.Millisecond) // ignores its context
				return 0, ctx.Err()
			case 2:
				time.Sleep(300 * time.Millisecond)
				panic("twin panics after its call returned")
			default:
				time.Sleep(400 * time.Millisecond)
				runtime.Goexit()
			}
			return 0, nil
		}
		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(50*time.Millisecond, cancel)
		start := time.Now()
		_, err := pipeline.Do(ctx, p, op)
		if !errors.Is(err, context.Canceled) {
			t.Errorf("err %v, want canceled", err)
		}
		if took := time.Since(start); took > 250*time.Millisecond {
			t.Errorf("took %v", took)
		}
		time.Sleep(time.Second)
		synctest.Wait()
	})
}
