package pipeline

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
	"go.uber.org/goleak"
)

// A fixed delay of "practically never" must not hedge at once (overflow of now+d).
func TestReview67HugeDelayNoHedge(t *testing.T) {
	for _, d := range []time.Duration{math.MaxInt64, math.MaxInt64 / 2, 200 * 365 * 24 * time.Hour} {
		p := New(WithHedging(hedge.New(hedge.Delay(d))))
		var n atomic.Int32
		_, err := Do(context.Background(), p, func(ctx context.Context) (int, error) {
			n.Add(1)
			time.Sleep(50 * time.Millisecond)
			return 1, nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if got := n.Load(); got != 1 {
			t.Errorf("Delay(%v): %d attempts, want 1 (hedge sent before its delay)", d, got)
		}
	}
}

// Adaptive delay after latencies of ~290 years (quantile of MaxInt64 ns).
func TestReview67AdaptiveHugeLatency(t *testing.T) {
	h := hedge.New(hedge.Quantile(0.5))
	for range 64 {
		h.Observe(math.MaxInt64)
	}
	d, ok := h.After()
	if !ok || d <= 0 {
		t.Fatalf("After = %v %v", d, ok)
	}
	p := New(WithHedging(h))
	var n atomic.Int32
	Do(context.Background(), p, func(ctx context.Context) (int, error) {
		n.Add(1)
		time.Sleep(50 * time.Millisecond)
		return 1, nil
	})
	if got := n.Load(); got != 1 {
		t.Errorf("delay %v: %d attempts, want 1", d, got)
	}
}

// A hedge wins while the first attempt ignores cancellation: the winner's answer
// is returned, the loser's error never surfaces, and the caller is held until the first returns.
func TestReview67WinnerFirstIgnoresCancel(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	p := New(WithHedging(hedge.New(hedge.Delay(10 * time.Millisecond))))
	var n atomic.Int32
	start := time.Now()
	v, err := Do(context.Background(), p, func(ctx context.Context) (int, error) {
		if n.Add(1) == 1 {
			time.Sleep(200 * time.Millisecond) // ignores ctx
			return 0, errors.New("loser")
		}
		return 2, nil
	})
	el := time.Since(start)
	if err != nil || v != 2 {
		t.Fatalf("got %v %v", v, err)
	}
	if el < 150*time.Millisecond {
		t.Logf("returned after %v (doc says it waits for the first attempt)", el)
	}
}

// Operation keeps its context after returning and uses it later; the spare must not
// hand the same context/state to the next call.
func TestReview67KeptContextSpare(t *testing.T) {
	p := New(WithHedging(hedge.New(hedge.Delay(time.Hour))))
	var kept []context.Context
	for i := range 100 {
		_, err := Do(context.Background(), p, func(ctx context.Context) (int, error) {
			kept = append(kept, ctx)
			return i, nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	for i, c := range kept {
		for j := i + 1; j < len(kept); j++ {
			if c == kept[j] {
				t.Fatalf("call %d and %d share context", i, j)
			}
		}
		if c.Err() == nil {
			// the doc: contexts canceled when the call returns
			t.Errorf("context of call %d not done after return", i)
			break
		}
	}
}

// One pipeline, two result types, many goroutines, hedges firing at different delays.
func TestReview67TwoTypesStress(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	h := hedge.New(hedge.Delay(2*time.Millisecond), hedge.MaxShare(1), hedge.MaxExtra(3))
	p := New(WithHedging(h))
	var wg sync.WaitGroup
	var bad atomic.Int32
	for g := range 200 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 50 {
				slow := (g+i)%3 == 0
				if g%2 == 0 {
					v, err := Do(context.Background(), p, func(ctx context.Context) (int, error) {
						if slow {
							select {
							case <-time.After(10 * time.Millisecond):
							case <-ctx.Done():
								return 0, ctx.Err()
							}
						}
						return g*1000 + i, nil
					})
					if err != nil || v != g*1000+i {
						bad.Add(1)
					}
				} else {
					v, err := Do(context.Background(), p, func(ctx context.Context) (string, error) {
						if slow {
							select {
							case <-time.After(10 * time.Millisecond):
							case <-ctx.Done():
								return "", ctx.Err()
							}
						}
						return "x", nil
					})
					if err != nil || v != "x" {
						bad.Add(1)
					}
				}
			}
		}()
	}
	wg.Wait()
	if bad.Load() != 0 {
		t.Fatalf("%d bad answers", bad.Load())
	}
	time.Sleep(50 * time.Millisecond)
}

// Many pipelines sharing one Policy, thousands of concurrent calls with different delays
// (adaptive): all answer, share bounded.
func TestReview67SharedPolicyManyPipelines(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	h := hedge.New(hedge.Quantile(0.5), hedge.MaxShare(0.1))
	ps := make([]*Pipeline, 8)
	for i := range ps {
		ps[i] = New(WithHedging(h))
	}
	var calls, attempts atomic.Int64
	var wg sync.WaitGroup
	for g := range 2000 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 10 {
				calls.Add(1)
				lat := time.Duration((g*7+i*13)%20) * time.Millisecond
				_, err := Do(context.Background(), ps[(g+i)%len(ps)], func(ctx context.Context) (int, error) {
					attempts.Add(1)
					select {
					case <-time.After(lat):
						return 1, nil
					case <-ctx.Done():
						return 0, ctx.Err()
					}
				})
				if err != nil {
					t.Error(err)
				}
			}
		}()
	}
	wg.Wait()
	c, a := calls.Load(), attempts.Load()
	t.Logf("calls %d attempts %d hedges %d", c, a, a-c)
	if float64(a-c) > 0.1*float64(c)*2+2 {
		t.Errorf("hedges %d over MaxShare of %d calls (even with two windows)", a-c, c)
	}
	time.Sleep(100 * time.Millisecond)
}

// Panic in a hedge: goes on in the caller; Goexit in a hedge likewise; no leak.
func TestReview67PanicInHedge(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	p := New(WithHedging(hedge.New(hedge.Delay(5 * time.Millisecond))))
	var n atomic.Int32
	func() {
		defer func() {
			if r := recover(); r != "boom" {
				t.Errorf("recovered %v, want boom", r)
			}
		}()
		Do(context.Background(), p, func(ctx context.Context) (int, error) {
			if n.Add(1) == 1 {
				<-ctx.Done()
				return 0, ctx.Err()
			}
			panic("boom")
		})
		t.Error("no panic")
	}()
	n.Store(0)
	done := make(chan bool)
	go func() {
		defer close(done)
		Do(context.Background(), p, func(ctx context.Context) (int, error) {
			if n.Add(1) == 1 {
				<-ctx.Done()
				return 0, ctx.Err()
			}
			runtime.Goexit()
			return 0, nil
		})
		t.Error("returned after Goexit in hedge")
	}()
	<-done
	// next call still works and spare is fine
	v, err := Do(context.Background(), p, func(ctx context.Context) (int, error) { return 7, nil })
	if v != 7 || err != nil {
		t.Fatal(v, err)
	}
	time.Sleep(20 * time.Millisecond)
}

// synctest: delay honoured exactly; hedges within a bubble.
func TestReview67SynctestDelay(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := New(WithHedging(hedge.New(hedge.Delay(100*time.Millisecond), hedge.MaxExtra(2), hedge.MaxShare(1))))
		start := time.Now()
		var mu sync.Mutex
		var at []time.Duration
		Do(context.Background(), p, func(ctx context.Context) (int, error) {
			mu.Lock()
			at = append(at, time.Since(start))
			mu.Unlock()
			select {
			case <-time.After(time.Second):
				return 1, nil
			case <-ctx.Done():
				return 0, ctx.Err()
			}
		})
		want := []time.Duration{0, 100 * time.Millisecond, 200 * time.Millisecond}
		if len(at) != 3 {
			t.Fatalf("attempts at %v", at)
		}
		for i := range at {
			if at[i] != want[i] {
				t.Errorf("attempt %d at %v want %v", i, at[i], want[i])
			}
		}
	})
}
