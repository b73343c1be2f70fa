package pipeline

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/resiliencekit/resiliencekit/hedge"
	"github.com/resiliencekit/resiliencekit/resilience"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

type zrevKey struct{}

// zrevTracer checks the numbering of attempts per call.
type zrevTracer struct{ bad, late, holes atomic.Int64 }

type zrevTrace struct {
	t     *zrevTracer
	mu    sync.Mutex
	nums  map[int]bool
	ended bool
}

func (t *zrevTracer) StartCall(ctx context.Context, name string) (context.Context, resilience.CallTrace) {
	return ctx, &zrevTrace{t: t, nums: map[int]bool{}}
}
func (c *zrevTrace) StartAttempt(ctx context.Context, a resilience.AttemptInfo) (context.Context, func(error)) {
	c.mu.Lock()
	if c.nums[a.Number] || a.Number < 1 {
		c.t.bad.Add(1)
		fmt.Println("ZREV duplicate or <1", a.Number, a.Hedge)
	}
	if c.ended {
		c.t.late.Add(1)
	}
	c.nums[a.Number] = true
	c.mu.Unlock()
	return ctx, func(error) {}
}
func (c *zrevTrace) End(error) {
	c.mu.Lock()
	// numbers 1..n without a hole
	for i := 1; i <= len(c.nums); i++ {
		if !c.nums[i] {
			c.t.holes.Add(1)
		}
	}
	c.ended = true
	c.mu.Unlock()
}

type zrevKept struct {
	ctx context.Context
	id  int
	ran *atomic.Bool
}

// Many goroutines hammer one pipeline with a mix of calls; each checks that
// the context its operation got, and the result it got, are its own.
func TestZRevHammer(t *testing.T) {
	for _, withTracer := range []bool{false, true} {
		t.Run(fmt.Sprint("tracer=", withTracer), func(t *testing.T) { zrevHammer(t, withTracer) })
	}
}

func zrevHammer(t *testing.T, withTracer bool) {
	tr := &zrevTracer{}
	var hedgedEvents atomic.Int64
	opts := []Option{
		WithHedging(hedge.New(hedge.Delay(3*time.Millisecond), hedge.MaxShare(1), hedge.MaxExtra(2))),
		WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(3), retrypolicy.BaseDelay(0))),
		WithAttemptTimeout(80 * time.Millisecond),
		WithTimeBudget(300 * time.Millisecond),
		WithListener(resilience.ListenerFunc(func(e resilience.Event) {
			if e.Kind == resilience.EventHedged {
				hedgedEvents.Add(1)
				if e.Attempt < 2 || e.Attempt > 3 {
					tr.bad.Add(1)
				}
			}
		})),
	}
	if withTracer {
		opts = append(opts, WithTracer(tr))
	}
	p := New(opts...)
	var id atomic.Int64
	var mismatches, wrongCtx atomic.Int64
	var keptMu sync.Mutex
	var kept []zrevKept
	var wg sync.WaitGroup
	const workers, perWorker = 16, 400
	errFlaky := errors.New("flaky")
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < perWorker; i++ {
				my := int(id.Add(1))
				ctx := context.WithValue(context.Background(), zrevKey{}, my)
				check := func(ctx context.Context) {
					if v, _ := ctx.Value(zrevKey{}).(int); v != my {
						wrongCtx.Add(1)
					}
				}
				kind := rand.IntN(10)
				var firstDone atomic.Bool
				op := func(ctx context.Context) (int, error) {
					check(ctx)
					isFirst := firstDone.CompareAndSwap(false, true)
					switch kind {
					case 0, 1, 2: // fast
					case 3: // first attempt slow: a hedge fires and wins
						if isFirst {
							select {
							case <-ctx.Done():
							case <-time.After(15 * time.Millisecond):
							}
						}
					case 4: // first fails fast, retry
						if isFirst {
							return 0, errFlaky
						}
					case 5: // keep the context past the call
						ran := new(atomic.Bool)
						context.AfterFunc(ctx, func() { ran.Store(true) })
						keptMu.Lock()
						kept = append(kept, zrevKept{ctx, my, ran})
						keptMu.Unlock()
					case 6: // nested call through the same pipeline, other type
						s, err := Do(ctx, p, func(ctx context.Context) (string, error) {
							check(ctx)
							return fmt.Sprint(my), nil
						})
						if err != nil && ctx.Err() == nil {
							return 0, err
						}
						if err == nil && s != fmt.Sprint(my) {
							mismatches.Add(1)
						}
					case 7: // panic
						panic(my)
					case 8: // slow first, hedge slow too: all wait ctx, caller cancels
						select {
						case <-ctx.Done():
							return 0, ctx.Err()
						case <-time.After(time.Duration(rand.IntN(8)) * time.Millisecond):
						}
					case 9: // check ctx again after a while
						time.Sleep(time.Duration(rand.IntN(5)) * time.Millisecond)
						check(ctx)
					}
					check(ctx)
					return my, nil
				}
				func() {
					cctx := ctx
					if kind == 8 {
						var cancel context.CancelFunc
						cctx, cancel = context.WithCancel(ctx)
						time.AfterFunc(time.Duration(rand.IntN(6))*time.Millisecond, cancel)
					}
					defer func() {
						if r := recover(); r != nil {
							if kind != 7 || r != any(my) {
								mismatches.Add(1)
								t.Errorf("call %d kind %d: panic %v", my, kind, r)
							}
						}
					}()
					var res int
					var err error
					if i%3 == 0 {
						var s string
						s, err = Do(cctx, p, func(ctx context.Context) (string, error) {
							r, err := op(ctx)
							return fmt.Sprint(r), err
						})
						if err == nil {
							fmt.Sscan(s, &res)
						}
					} else {
						res, err = Do(cctx, p, op)
					}
					if kind == 7 {
						t.Errorf("call %d: panic lost", my)
					}
					if err == nil && res != my {
						mismatches.Add(1)
						t.Errorf("call %d kind %d: got %d", my, kind, res)
					}
					if err != nil && kind != 8 && kind != 6 {
						t.Errorf("call %d kind %d: %v", my, kind, err)
					}
				}()
			}
		}()
	}
	wg.Wait()
	time.Sleep(50 * time.Millisecond)
	for _, k := range kept {
		if v, _ := k.ctx.Value(zrevKey{}).(int); v != k.id {
			t.Errorf("kept ctx of %d has value %v", k.id, v)
		}
		if k.ctx.Err() == nil {
			t.Errorf("kept ctx of %d not canceled after the call", k.id)
		}
		if !k.ran.Load() {
			t.Errorf("AfterFunc on kept ctx of %d did not run", k.id)
		}
	}
	if mismatches.Load()+wrongCtx.Load()+tr.bad.Load() != 0 {
		t.Errorf("mismatches %d, wrong ctx %d, bad numbering %d", mismatches.Load(), wrongCtx.Load(), tr.bad.Load())
	}
	if tr.late.Load() != 0 { // a hedge admitted as its call returned started its span after the call's ended
		t.Errorf("tracer: %d attempts started after their call's End", tr.late.Load())
	}
	t.Logf("tracer: calls with holes in their attempts' numbers %d", tr.holes.Load())
	t.Logf("hedged events %d, kept %d, goroutines %d", hedgedEvents.Load(), len(kept), runtime.NumGoroutine())
}
