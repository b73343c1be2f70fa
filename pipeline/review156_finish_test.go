package pipeline

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/resiliencekit/resiliencekit/hedge"
	"github.com/resiliencekit/resiliencekit/resilience"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
	"go.uber.org/goleak"
)

// r156Discards counts Discard calls per result value.
type r156Discards struct {
	mu sync.Mutex
	n  map[int]int
}

func (d *r156Discards) fn(v int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.n == nil {
		d.n = map[int]int{}
	}
	d.n[v]++
}

func (d *r156Discards) get() map[int]int {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := map[int]int{}
	for k, v := range d.n {
		out[k] = v
	}
	return out
}

var r156Fail = errors.New("r156: transient failure")

// (1) With MaxExtra above 1, a twin out gets a twin of its own after the
// first attempt failed, and that twin's success is the answer; every
// other result is discarded exactly once.
func TestReview156TwinOfTwinAfterFirstFailed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var hedged atomic.Int32
		p := New(WithHedging(hedge.New(hedge.Delay(100*time.Millisecond), hedge.MaxExtra(3), hedge.MaxShare(1))),
			WithListener(resilience.ListenerFunc(func(e resilience.Event) {
				if e.Kind == resilience.EventHedged {
					hedged.Add(1)
				}
			})))
		var n atomic.Int32
		var d r156Discards
		start := time.Now()
		res, err := Do(t.Context(), p, func(ctx context.Context) (int, error) {
			switch n.Add(1) {
			case 1: // the first attempt fails at 150 ms, hedge 1 out
				time.Sleep(150 * time.Millisecond)
				return 1, r156Fail
			case 2: // hedge 1, sent at 100 ms: slow, heeds its context
				select {
				case <-ctx.Done():
					return 2, ctx.Err()
				case <-time.After(time.Second):
					return 2, r156Fail
				}
			default: // hedge 2, sent at 200 ms: succeeds at 260 ms
				time.Sleep(60 * time.Millisecond)
				return 3, nil
			}
		}, Discard(d.fn))
		took := time.Since(start)
		if err != nil || res != 3 {
			t.Fatalf("got %d, %v; want hedge 2's success 3", res, err)
		}
		if took != 260*time.Millisecond {
			t.Errorf("returned after %v, want 260ms", took)
		}
		time.Sleep(2 * time.Second)
		synctest.Wait()
		if got := d.get(); got[1] != 1 || got[2] != 1 || got[3] != 0 || len(got) != 2 {
			t.Errorf("discards %v, want 1 and 2 once each, never the returned 3", got)
		}
		if hedged.Load() != 2 || n.Load() != 3 {
			t.Errorf("hedged %d, attempts %d; want 2 hedges, 3 attempts", hedged.Load(), n.Load())
		}
	})
}

// (b) A stubborn hedge (ignores its context) is abandoned once the time
// budget ends after the first attempt failed; its success, coming after,
// is discarded exactly once; the next calls through the pipeline run as
// they should (shared timer, spare memory).
func TestReview156BudgetEndsWhileStubbornHedgeOut(t *testing.T) {
	for _, how := range []string{"budget", "cancel"} {
		t.Run(how, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				opts := []Option{WithHedging(hedge.New(hedge.Delay(100*time.Millisecond), hedge.MaxShare(1))),
					WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(3), retrypolicy.BaseDelay(time.Millisecond)))}
				ctx := t.Context()
				if how == "budget" {
					opts = append(opts, WithTimeBudget(300*time.Millisecond))
				} else {
					var cancel context.CancelFunc
					ctx, cancel = context.WithCancel(ctx)
					time.AfterFunc(300*time.Millisecond, cancel)
				}
				p := New(opts...)
				var n atomic.Int32
				var d r156Discards
				base := runtime.NumGoroutine()
				start := time.Now()
				res, err := Do(ctx, p, func(ctx context.Context) (int, error) {
					switch n.Add(1) {
					case 1:
						time.Sleep(150 * time.Millisecond)
						return 1, r156Fail
					case 2: // hedge, stubborn: succeeds at 1.1 s whatever its context
						time.Sleep(time.Second)
						return 2, nil
					default:
						return 99, fmt.Errorf("r156: unexpected attempt %d", n.Load())
					}
				}, Discard(d.fn))
				took := time.Since(start)
				if err == nil || res == 2 {
					t.Fatalf("got %d, %v; want a failure at 300ms", res, err)
				}
				if took != 300*time.Millisecond {
					t.Errorf("returned after %v, want 300ms (the context's end)", took)
				}
				if !Hedged(err) {
					t.Errorf("Hedged(%v) = false, a hedge was sent", err)
				}
				time.Sleep(100 * time.Millisecond)
				if extra := runtime.NumGoroutine() - base; extra > 2 {
					t.Errorf("%d goroutines left while the stubborn hedge runs (want its own, and at most a disposer)", extra)
				}
				if got := d.get(); len(got) != 0 {
					t.Errorf("discarded %v before the stubborn hedge returned", got)
				}
				time.Sleep(time.Second)
				synctest.Wait()
				if got := d.get(); got[2] != 1 || len(got) != 1 {
					t.Errorf("discards %v, want the late success 2 exactly once", got)
				}
				if n.Load() != 2 {
					t.Errorf("%d attempts, want 2 (nothing sent after the context ended)", n.Load())
				}
				// The pipeline's next calls, back to back: fast ones, and
				// slow ones a hedge wins.
				for i := range 40 {
					var m atomic.Int32
					start := time.Now()
					res, err := Do(t.Context(), p, func(ctx context.Context) (int, error) {
						k := m.Add(1)
						if i%2 == 0 {
							time.Sleep(10 * time.Millisecond)
							return 100 + i, nil
						}
						if k == 1 {
							select {
							case <-ctx.Done():
								return -1, ctx.Err()
							case <-time.After(time.Second):
								return -1, nil
							}
						}
						time.Sleep(20 * time.Millisecond)
						return 100 + i, nil
					}, Discard(d.fn))
					want := 10 * time.Millisecond
					if i%2 == 1 {
						want = 120 * time.Millisecond
					}
					if err != nil || res != 100+i || time.Since(start) != want {
						t.Fatalf("call %d after the abandon: %d, %v after %v; want %d after %v", i, res, err, time.Since(start), 100+i, want)
					}
				}
				synctest.Wait()
				if got := d.get(); got[-1] != 20 {
					t.Errorf("discards %v, want the 20 canceled first attempts", got)
				}
			})
		})
	}
}

// (1) A hedge's success that comes before the context ends is returned,
// even 1 ms before.
func TestReview156HedgeSuccessJustBeforeEnd(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := New(WithHedging(hedge.New(hedge.Delay(100*time.Millisecond))), WithTimeBudget(300*time.Millisecond))
		var n atomic.Int32
		var d r156Discards
		res, err := Do(t.Context(), p, func(ctx context.Context) (int, error) {
			if n.Add(1) == 1 {
				time.Sleep(150 * time.Millisecond)
				return 1, r156Fail
			}
			time.Sleep(199 * time.Millisecond)
			return 2, nil
		}, Discard(d.fn))
		if err != nil || res != 2 {
			t.Fatalf("got %d, %v; want the hedge's success at 299ms", res, err)
		}
		synctest.Wait()
		if got := d.get(); got[1] != 1 || len(got) != 1 {
			t.Errorf("discards %v, want the first attempt's 1 once", got)
		}
	})
}

// r156SlowEnd is a tracer whose hedges' spans take a while to end.
type r156SlowEnd struct{ endDelay time.Duration }

func (r r156SlowEnd) StartCall(ctx context.Context, _ string) (context.Context, resilience.CallTrace) {
	return ctx, r
}
func (r r156SlowEnd) StartAttempt(ctx context.Context, a resilience.AttemptInfo) (context.Context, func(error)) {
	if !a.Hedge {
		return ctx, func(error) {}
	}
	return ctx, func(error) { time.Sleep(r.endDelay) }
}
func (r156SlowEnd) End(error) {}

// (1)/(b) A hedge whose operation succeeded before the budget ended, but
// whose span the tracer ended slowly, across the budget's end: the
// dependency answered in time. Is its success returned?
func TestReview156HedgeSuccessInTimeSlowSpanEnd(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := New(WithHedging(hedge.New(hedge.Delay(100*time.Millisecond))), WithTimeBudget(300*time.Millisecond),
			WithTracer(r156SlowEnd{endDelay: 100 * time.Millisecond}))
		var n atomic.Int32
		var opDone atomic.Int64
		var d r156Discards
		start := time.Now()
		res, err := Do(t.Context(), p, func(ctx context.Context) (int, error) {
			if n.Add(1) == 1 {
				time.Sleep(150 * time.Millisecond)
				return 1, r156Fail
			}
			time.Sleep(150 * time.Millisecond) // succeeds at 250 ms, 50 ms before the budget ends
			opDone.Store(int64(time.Since(start)))
			return 2, nil
		}, Discard(d.fn))
		synctest.Wait()
		time.Sleep(time.Second)
		if err != nil || res != 2 {
			t.Errorf("got %d, %v: the hedge's operation succeeded at %v, before the budget's end at 300ms, yet the call failed; discards %v",
				res, err, time.Duration(opDone.Load()), d.get())
		}
	})
}

// r156SlowHedgeStart is a tracer whose hedges' spans take a while to start.
type r156SlowHedgeStart struct{ d time.Duration }

func (r r156SlowHedgeStart) StartCall(ctx context.Context, _ string) (context.Context, resilience.CallTrace) {
	return ctx, r
}
func (r r156SlowHedgeStart) StartAttempt(ctx context.Context, a resilience.AttemptInfo) (context.Context, func(error)) {
	if a.Hedge {
		time.Sleep(r.d)
	}
	return ctx, func(error) {}
}
func (r156SlowHedgeStart) End(error) {}

// (a) With MaxAttempts(1), a first attempt that failed while no other
// attempt's operation runs is the call's answer: no operation is called
// after it (review154's "a retry no MaxAttempts saw"). Here the hedge was
// launched at 100 ms, the first attempt fails at 120 ms, and the hedge's
// span (or a listener of EventHedged) holds it until 150 ms.
func TestReview156NoOpCallAfterFirstFailedAlone(t *testing.T) {
	for _, via := range []string{"tracer", "listener"} {
		t.Run(via, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				opts := []Option{WithHedging(hedge.New(hedge.Delay(100 * time.Millisecond))),
					WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(1)))}
				if via == "tracer" {
					opts = append(opts, WithTracer(r156SlowHedgeStart{50 * time.Millisecond}))
				} else {
					opts = append(opts, WithListener(resilience.ListenerFunc(func(e resilience.Event) {
						if e.Kind == resilience.EventHedged {
							time.Sleep(50 * time.Millisecond)
						}
					})))
				}
				p := New(opts...)
				var running, n atomic.Int32
				var afterAlone atomic.Bool
				var firstFailedAt atomic.Int64
				start := time.Now()
				_, err := Do(t.Context(), p, func(ctx context.Context) (int, error) {
					k := n.Add(1)
					if running.Add(1) == 1 && firstFailedAt.Load() != 0 {
						afterAlone.Store(true)
					}
					defer running.Add(-1)
					if k == 1 {
						time.Sleep(120 * time.Millisecond)
						firstFailedAt.Store(int64(time.Since(start)))
						return 1, r156Fail
					}
					time.Sleep(10 * time.Millisecond)
					return 2, r156Fail
				})
				synctest.Wait()
				if afterAlone.Load() {
					t.Errorf("the hedge's operation was called at %v, after the first attempt failed alone at %v (MaxAttempts 1): %d attempts; err %v",
						time.Since(start)-10*time.Millisecond, time.Duration(firstFailedAt.Load()), n.Load(), err)
				}
			})
		})
	}
}

// (b) Real time, -race, goleak: many calls back to back and concurrently,
// some whose budget ends while a stubborn hedge is out after the first
// attempt failed; every result is returned or discarded, never both,
// never twice; nothing leaks once the stubborn operations return.
func TestReview156RealTimeAbandonMix(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	p := New(WithHedging(hedge.New(hedge.Delay(5*time.Millisecond), hedge.MaxExtra(2), hedge.MaxShare(1))),
		WithTimeBudget(40*time.Millisecond),
		WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(2), retrypolicy.BaseDelay(time.Millisecond))))
	var ids atomic.Int64
	var mu sync.Mutex
	discarded := map[int64]int{}
	returned := map[int64]bool{}
	successes := map[int64]bool{}
	disc := func(v int64) {
		mu.Lock()
		discarded[v]++
		mu.Unlock()
	}
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range 60 {
				kind := (i + g) % 4
				var n atomic.Int32
				res, err := Do(context.Background(), p, func(ctx context.Context) (int64, error) {
					id := ids.Add(1)
					k := n.Add(1)
					switch {
					case kind == 0: // fast
						time.Sleep(time.Millisecond)
					case kind == 1 && k == 1: // slow first, a hedge wins
						<-ctx.Done()
						return id, ctx.Err()
					case kind == 1:
						time.Sleep(2 * time.Millisecond)
					case kind >= 2 && k == 1: // first fails at 8 ms, hedges stubborn
						time.Sleep(8 * time.Millisecond)
						return id, r156Fail
					default:
						time.Sleep(60 * time.Millisecond) // past the budget, whatever its context
					}
					mu.Lock()
					successes[id] = true
					mu.Unlock()
					return id, nil
				}, Discard(disc))
				if err == nil {
					mu.Lock()
					if returned[res] {
						t.Errorf("result %d returned twice", res)
					}
					returned[res] = true
					mu.Unlock()
				} else if kind == 0 || kind == 1 && Hedged(err) { // a kind 1 call whose hedge MaxShare refused waits out its budget
					t.Errorf("kind %d call failed: %v", kind, err)
				}
			}
		})
	}
	wg.Wait()
	deadline := time.Now().Add(2 * time.Second)
	for {
		mu.Lock()
		done := true
		for id := range successes {
			if !returned[id] && discarded[id] == 0 {
				done = false
			}
		}
		mu.Unlock()
		if done || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	mu.Lock()
	defer mu.Unlock()
	for id, c := range discarded {
		if id == 0 { // T's zero value, of attempts that returned none (a hedge not sent): Discard's doc says it is given too
			continue
		}
		if c != 1 {
			t.Errorf("result %d discarded %d times", id, c)
		}
		if returned[id] {
			t.Errorf("result %d returned and discarded", id)
		}
	}
	for id := range successes {
		if !returned[id] && discarded[id] == 0 {
			t.Errorf("success %d neither returned nor discarded", id)
		}
	}
}
