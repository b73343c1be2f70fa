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
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/resilience"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

// review157Tracer ends a hedge's span slowly: the time between the hedge's
// r.returned and its hedgeEnded.
type review157Tracer struct{ hedgeEnd time.Duration }

func (t review157Tracer) StartCall(ctx context.Context, name string) (context.Context, resilience.CallTrace) {
	return ctx, review157Trace(t)
}

type review157Trace review157Tracer

func (t review157Trace) StartAttempt(ctx context.Context, a resilience.AttemptInfo) (context.Context, func(error)) {
	if a.Hedge {
		return ctx, func(err error) {
			if err == nil {
				time.Sleep(t.hedgeEnd)
			}
		}
	}
	return ctx, func(error) {}
}
func (review157Trace) End(error) {}

// A hedge succeeds while the first attempt still runs; its span's end is
// slow (a tracer exporting synchronously); the first attempt then fails;
// the caller's deadline comes before the slow span ends. The hedge's
// success came before the deadline and before the failure: the promise is
// that a success is never discarded while the call returns a failure.
func TestReview157HedgeSuccessBeforeFirstFailsNotDiscarded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := pipeline.New(
			pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(1))),
			pipeline.WithHedging(hedge.New(hedge.Delay(10*time.Millisecond))),
			pipeline.WithTracer(review157Tracer{hedgeEnd: 200 * time.Millisecond}),
		)
		var discards, calls atomic.Int32
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		res, err := pipeline.Do(ctx, p, func(ctx context.Context) (string, error) {
			if calls.Add(1) == 1 { // first attempt: fails at 50ms
				time.Sleep(50 * time.Millisecond)
				return "", errors.New("first failed")
			}
			time.Sleep(20 * time.Millisecond) // the hedge: succeeds at 30ms
			return "hedge", nil
		}, pipeline.Discard(func(string) { discards.Add(1) }))
		synctest.Wait()
		time.Sleep(time.Second) // let the slow span and any abandon end
		synctest.Wait()
		if err != nil || res != "hedge" {
			t.Errorf("Do = %q, %v; want the hedge's success (it came at 30ms, before the first's failure at 50ms and the deadline at 100ms); discards %d",
				res, err, discards.Load())
		}
	})
}

// MaxExtra 2: the first attempt fails while hedge 1 (slow, to succeed) is
// out; hedge 2 (a twin of a twin) must still run (documented), and the
// call must return hedge 1's or 2's success.
func TestReview157TwinOfTwinStillRuns(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := pipeline.New(
			pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(1))),
			pipeline.WithHedging(hedge.New(hedge.Delay(10*time.Millisecond), hedge.MaxExtra(2), hedge.MaxShare(1))),
		)
		var calls atomic.Int32
		res, err := pipeline.Do(context.Background(), p, func(ctx context.Context) (string, error) {
			switch calls.Add(1) {
			case 1:
				time.Sleep(15 * time.Millisecond)
				return "", errors.New("first failed")
			case 2: // hedge 1 at 10ms: slow
				select {
				case <-time.After(200 * time.Millisecond):
					return "h1", nil
				case <-ctx.Done():
					return "", ctx.Err()
				}
			default: // hedge 2 at 20ms: fast
				time.Sleep(5 * time.Millisecond)
				return "h2", nil
			}
		})
		if n := calls.Load(); n != 3 {
			t.Errorf("operation called %d times, want 3 (twin of a twin after the first failed)", n)
		}
		if err != nil || res != "h2" {
			t.Errorf("Do = %q, %v; want h2", res, err)
		}
	})
}

// Discard exactly once for each success not returned, never for the one
// returned, with several hedges succeeding late after the first failed
// and the context ending.
func TestReview157DiscardOnceLateSuccesses(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := pipeline.New(
			pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(1))),
			pipeline.WithHedging(hedge.New(hedge.Delay(10*time.Millisecond), hedge.MaxExtra(3), hedge.MaxShare(1))),
		)
		for i := range 20 {
			var calls atomic.Int32
			var mu sync.Mutex
			discarded := map[int32]int{}
			made := map[int32]bool{}
			early := 0 // successes before the deadline
			dl := time.Now().Add(time.Duration(30+i*3) * time.Millisecond)
			ctx, cancel := context.WithTimeout(context.Background(), time.Duration(30+i*3)*time.Millisecond)
			res, err := pipeline.Do(ctx, p, func(ctx context.Context) (int32, error) {
				n := calls.Add(1)
				if n == 1 {
					time.Sleep(12 * time.Millisecond)
					return 0, errors.New("first failed")
				}
				time.Sleep(time.Duration(25+5*n) * time.Millisecond) // ignores ctx
				mu.Lock()
				made[n] = true
				if time.Now().Before(dl) {
					early++
				}
				mu.Unlock()
				return n, nil
			}, pipeline.Discard(func(v int32) { mu.Lock(); discarded[v]++; mu.Unlock() }))
			time.Sleep(time.Second)
			synctest.Wait()
			cancel()
			mu.Lock()
			for v := range made {
				want := 1
				if err == nil && res == v {
					want = 0
				}
				if discarded[v] != want {
					t.Errorf("run %d: Do = %v, %v; success %d discarded %d times, want %d", i, res, err, v, discarded[v], want)
				}
			}
			if err != nil && early > 0 {
				t.Errorf("run %d: Do = %v, %v though %d hedges succeeded before the deadline", i, res, err, early)
			}
			mu.Unlock()
		}
	})
}

// MaxExtra 2: the first attempt fails; hedge 1 (ignoring its context)
// succeeds at 90ms, its span's end slow; hedge 2 heeds its context and
// fails with it at the deadline (100ms). Hedge 1's success came before the
// deadline, and set firstWon: the call must return it, not hedge 2's
// cancellation, and discard nothing it returns.
func TestReview157SuccessThenCanceledTwin(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := pipeline.New(
			pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(1))),
			pipeline.WithHedging(hedge.New(hedge.Delay(10*time.Millisecond), hedge.MaxExtra(2), hedge.MaxShare(1))),
			pipeline.WithTracer(review157Tracer{hedgeEnd: 200 * time.Millisecond}),
		)
		var calls, discards atomic.Int32
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		res, err := pipeline.Do(ctx, p, func(ctx context.Context) (string, error) {
			switch calls.Add(1) {
			case 1:
				time.Sleep(25 * time.Millisecond)
				return "", errors.New("first failed")
			case 2:
				time.Sleep(80 * time.Millisecond) // to 90ms, ignoring ctx
				return "h1", nil
			default:
				<-ctx.Done()
				return "", ctx.Err()
			}
		}, pipeline.Discard(func(string) { discards.Add(1) }))
		time.Sleep(time.Second)
		synctest.Wait()
		if calls.Load() != 3 {
			t.Fatalf("operation called %d times, want 3", calls.Load())
		}
		if err != nil || res != "h1" {
			t.Errorf("Do = %q, %v; want h1 (a success at 90ms, before the deadline); discards %d", res, err, discards.Load())
		}
	})
}

// The same in real time (the pipeline's shared hedge timer, not a
// bubble's): 5 calls, each must return the hedge's success.
func TestReview157HedgeSuccessBeforeFirstFailsRealTime(t *testing.T) {
	p := pipeline.New(
		pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(1))),
		pipeline.WithHedging(hedge.New(hedge.Delay(10*time.Millisecond), hedge.MaxShare(1))),
		pipeline.WithTracer(review157Tracer{hedgeEnd: 150 * time.Millisecond}),
	)
	bad := 0
	for range 5 {
		var calls atomic.Int32
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		res, err := pipeline.Do(ctx, p, func(ctx context.Context) (string, error) {
			if calls.Add(1) == 1 {
				time.Sleep(50 * time.Millisecond)
				return "", errors.New("first failed")
			}
			time.Sleep(20 * time.Millisecond)
			return "hedge", nil
		})
		cancel()
		if err != nil || res != "hedge" {
			bad++
		}
		time.Sleep(200 * time.Millisecond)
	}
	if bad > 0 {
		t.Errorf("%d of 5 calls returned a failure though the hedge succeeded at ~30ms", bad)
	}
}
