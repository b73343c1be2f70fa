package pipeline_test

import (
	"context"
	"errors"
	"math"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/resiliencekit/resiliencekit/hedge"
	"github.com/resiliencekit/resiliencekit/limit"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/resilience"
	"go.uber.org/goleak"
)

type r72Tracer struct {
	start func(ctx context.Context, a resilience.AttemptInfo) (context.Context, func(error))
}

func (t r72Tracer) StartCall(ctx context.Context, _ string) (context.Context, resilience.CallTrace) {
	return ctx, r72Trace(t)
}

type r72Trace r72Tracer

func (t r72Trace) StartAttempt(ctx context.Context, a resilience.AttemptInfo) (context.Context, func(error)) {
	return t.start(ctx, a)
}
func (r72Trace) End(error) {}

// A 20 ms tracer, a 10 ms delay, an instant op: no hedge.
func TestReview72SlowTracerNoHedge(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	tr := r72Tracer{start: func(ctx context.Context, a resilience.AttemptInfo) (context.Context, func(error)) {
		time.Sleep(20 * time.Millisecond)
		return ctx, func(error) {}
	}}
	p := pipeline.New(pipeline.WithHedging(hedge.New(hedge.Delay(10*time.Millisecond), hedge.MaxShare(1), hedge.MaxExtra(3))), pipeline.WithTracer(tr))
	var ops atomic.Int64
	var wg sync.WaitGroup
	for range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := pipeline.Do(context.Background(), p, func(ctx context.Context) (int, error) { ops.Add(1); return 1, nil })
			if err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if ops.Load() != 50 {
		t.Errorf("ops %d for 50 calls", ops.Load())
	}
}

// Hedges' tracer slow, first fast, op slow: hedges are still sent, once each delay.
func TestReview72SynctestSleepingTracerMaxExtra3(t *testing.T) {
	for _, tracerD := range []time.Duration{0, time.Millisecond, 5 * time.Millisecond, 50 * time.Millisecond} {
		synctest.Test(t, func(t *testing.T) {
			tr := r72Tracer{start: func(ctx context.Context, a resilience.AttemptInfo) (context.Context, func(error)) {
				time.Sleep(tracerD)
				return ctx, func(error) { time.Sleep(tracerD) }
			}}
			lim := limit.NewFixed(2, limit.MaxWaiting(64))
			p := pipeline.New(pipeline.WithHedging(hedge.New(hedge.Delay(10*time.Millisecond), hedge.MaxShare(1), hedge.MaxExtra(3))), pipeline.WithTracer(tr), pipeline.WithLimit(lim))
			var ops atomic.Int64
			var wg sync.WaitGroup
			for i := range 4 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					_, err := pipeline.Do(context.Background(), p, func(ctx context.Context) (int, error) {
						n := ops.Add(1)
						if n%3 == 0 {
							return 1, nil
						}
						select {
						case <-time.After(100 * time.Millisecond):
						case <-ctx.Done():
							return 0, ctx.Err()
						}
						return 1, nil
					})
					if err != nil {
						t.Errorf("call %d, tracer %v: %v", i, tracerD, err)
					}
				}()
			}
			wg.Wait()
			time.Sleep(time.Second)
			synctest.Wait()
			t.Logf("tracer %v: ops %d", tracerD, ops.Load())
		})
	}
}

// A tracer returning a nil context for the attempt.
func TestReview72NilCtxTracer(t *testing.T) {
	tr := r72Tracer{start: func(ctx context.Context, a resilience.AttemptInfo) (context.Context, func(error)) {
		return nil, nil
	}}
	for _, hedged := range []bool{false, true} { // hedged: a panic on abandon's goroutine crashed the process
		opts := []pipeline.Option{pipeline.WithTracer(tr), pipeline.WithAttemptTimeout(time.Second)}
		if hedged {
			opts = append(opts, pipeline.WithHedging(hedge.New(hedge.Delay(time.Millisecond), hedge.MaxShare(1))))
		}
		p := pipeline.New(opts...)
		func() {
			defer func() {
				if r := recover(); r != nil {
					t.Errorf("call panicked: %v", r)
				}
			}()
			_, err := pipeline.Do(context.Background(), p, func(ctx context.Context) (int, error) {
				if ctx == nil {
					return 0, errors.New("nil ctx")
				}
				time.Sleep(5 * time.Millisecond)
				return 1, ctx.Err()
			})
			if err != nil {
				t.Errorf("err %v", err)
			}
		}()
	}
}

// A tracer that calls runtime.Goexit in StartAttempt: a limit slot must not leak.
func TestReview72GoexitTracerLimit(t *testing.T) {
	var bad atomic.Bool
	bad.Store(true)
	tr := r72Tracer{start: func(ctx context.Context, a resilience.AttemptInfo) (context.Context, func(error)) {
		if bad.Load() {
			runtime.Goexit()
		}
		return ctx, func(error) {}
	}}
	lim := limit.NewFixed(1)
	p := pipeline.New(pipeline.WithHedging(hedge.New(hedge.Delay(time.Millisecond), hedge.MaxShare(1))), pipeline.WithTracer(tr), pipeline.WithLimit(lim))
	done := make(chan struct{})
	go func() {
		defer close(done)
		pipeline.Do(context.Background(), p, func(ctx context.Context) (int, error) { return 1, nil })
	}()
	<-done
	bad.Store(false)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_, err := pipeline.Do(ctx, p, func(ctx context.Context) (int, error) { return 1, nil })
	if err != nil {
		t.Errorf("healthy call after a Goexit in the tracer: %v", err)
	}
}

// Same with a panicking tracer: the panic is recovered; no leak either.
func TestReview72PanicTracerLimit(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	tr := r72Tracer{start: func(ctx context.Context, a resilience.AttemptInfo) (context.Context, func(error)) {
		time.Sleep(3 * time.Millisecond)
		panic("tracer")
	}}
	lim := limit.NewFixed(2, limit.MaxWaiting(64))
	p := pipeline.New(pipeline.WithHedging(hedge.New(hedge.Delay(time.Millisecond), hedge.MaxShare(1), hedge.MaxExtra(3))), pipeline.WithTracer(tr), pipeline.WithLimit(lim))
	var wg sync.WaitGroup
	for range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_, err := pipeline.Do(ctx, p, func(ctx context.Context) (int, error) {
				select {
				case <-time.After(5 * time.Millisecond):
					return 1, nil
				case <-ctx.Done():
					return 0, ctx.Err()
				}
			})
			if err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	time.Sleep(50 * time.Millisecond)
}

// A delay near MaxInt64: never hedges, and calls complete.
func TestReview72HugeDelay(t *testing.T) {
	for _, d := range []time.Duration{math.MaxInt64, math.MaxInt64 - 1, math.MaxInt64 / 2 * 1} {
		p := pipeline.New(pipeline.WithHedging(hedge.New(hedge.Delay(d), hedge.MaxShare(1))))
		p2 := pipeline.New(pipeline.WithHedging(hedge.New(hedge.Delay(time.Millisecond), hedge.MaxShare(1))))
		var ops atomic.Int64
		_, err := pipeline.Do(context.Background(), p, func(ctx context.Context) (int, error) { ops.Add(1); time.Sleep(20 * time.Millisecond); return 1, nil })
		if err != nil || ops.Load() != 1 {
			t.Errorf("d %v: err %v ops %d", d, err, ops.Load())
		}
		ops.Store(0)
		_, err = pipeline.Do(context.Background(), p2, func(ctx context.Context) (int, error) {
			ops.Add(1)
			select {
			case <-time.After(30 * time.Millisecond):
			case <-ctx.Done():
			}
			return 1, nil
		})
		if ops.Load() < 2 {
			t.Errorf("p2 not hedged: ops %d", ops.Load())
		}
	}
}

// Without a limit: hedges at delay after the first span's start, and the
// call answers at the hedge's answer.
func TestReview72SynctestSleepingTracerTimes(t *testing.T) {
	for _, tracerD := range []time.Duration{0, time.Millisecond, 5 * time.Millisecond, 50 * time.Millisecond} {
		synctest.Test(t, func(t *testing.T) {
			tr := r72Tracer{start: func(ctx context.Context, a resilience.AttemptInfo) (context.Context, func(error)) {
				time.Sleep(tracerD)
				return ctx, func(error) { time.Sleep(tracerD) }
			}}
			p := pipeline.New(pipeline.WithHedging(hedge.New(hedge.Delay(10*time.Millisecond), hedge.MaxShare(1), hedge.MaxExtra(3))), pipeline.WithTracer(tr))
			var ops atomic.Int64
			var times []time.Duration
			var mu sync.Mutex
			t0 := time.Now()
			_, err := pipeline.Do(context.Background(), p, func(ctx context.Context) (int, error) {
				n := ops.Add(1)
				mu.Lock()
				times = append(times, time.Since(t0))
				mu.Unlock()
				if n == 3 {
					return 1, nil
				}
				select {
				case <-time.After(time.Second):
				case <-ctx.Done():
					return 0, ctx.Err()
				}
				return 1, nil
			})
			el := time.Since(t0)
			time.Sleep(time.Second) // losers' end funcs sleep: time stops once the bubble's main returns
			synctest.Wait()
			t.Logf("tracer %v: err %v ops %d op starts %v, call %v", tracerD, err, ops.Load(), times, el)
			if err != nil || ops.Load() != 3 || el > 2*tracerD+20*time.Millisecond+2*tracerD {
				t.Errorf("tracer %v: err %v ops %d", tracerD, err, ops.Load())
			}
		})
	}
}

// MaxExtra(1): the first attempt answers while the hedge's tracer sleeps
// in StartAttempt (holding the call's state lock).
func TestReview72SynctestFirstAnswersDuringHedgeSpan(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tr := r72Tracer{start: func(ctx context.Context, a resilience.AttemptInfo) (context.Context, func(error)) {
			time.Sleep(50 * time.Millisecond)
			return ctx, func(error) {}
		}}
		p := pipeline.New(pipeline.WithHedging(hedge.New(hedge.Delay(10*time.Millisecond), hedge.MaxShare(1))), pipeline.WithTracer(tr))
		var ops atomic.Int64
		t0 := time.Now()
		done := make(chan struct{})
		go func() {
			defer close(done)
			_, err := pipeline.Do(context.Background(), p, func(ctx context.Context) (int, error) {
				if ops.Add(1) == 1 {
					time.Sleep(20 * time.Millisecond)
				}
				return 1, nil
			})
			if err != nil {
				t.Error(err)
			}
		}()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
		}
		t.Logf("call took %v (first op answered at 70ms), ops %d", time.Since(t0), ops.Load())
		time.Sleep(time.Second)
	})
}

// Real time: the call's return waits for a losing hedge's StartAttempt.
func TestReview72RealFirstAnswersDuringHedgeSpan(t *testing.T) {
	spanned := make(chan struct{}, 1)
	tr := r72Tracer{start: func(ctx context.Context, a resilience.AttemptInfo) (context.Context, func(error)) {
		if a.Hedge {
			time.Sleep(500 * time.Millisecond)
			spanned <- struct{}{}
		}
		return ctx, func(error) {}
	}}
	defer func() { <-spanned; time.Sleep(50 * time.Millisecond) }() // the losing hedge, then its disposal, end after the call
	p := pipeline.New(pipeline.WithHedging(hedge.New(hedge.Delay(10*time.Millisecond), hedge.MaxShare(1))), pipeline.WithTracer(tr))
	t0 := time.Now()
	_, err := pipeline.Do(context.Background(), p, func(ctx context.Context) (int, error) {
		time.Sleep(30 * time.Millisecond)
		return 1, nil
	})
	el := time.Since(t0)
	t.Logf("call took %v; its operation answered at 30ms", el)
	if err != nil || el > 200*time.Millisecond {
		t.Errorf("err %v, call took %v", err, el)
	}
}
