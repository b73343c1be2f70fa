package registry_test

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/hedge"
	"github.com/resiliencekit/resiliencekit/limit"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/registry"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

var r124Err = errors.New("503")

func r124Pipe(t *testing.T, r *registry.Registry, name string, opts ...pipeline.Option) *pipeline.Pipeline {
	base := []pipeline.Option{pipeline.WithName(name),
		pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(3), retrypolicy.BaseDelay(time.Millisecond))),
		pipeline.WithHedging(hedge.New(hedge.Delay(10*time.Millisecond), hedge.MaxShare(1), hedge.MaxExtra(2))),
	}
	p, err := r.AddPipeline(pipeline.New(append(base, opts...)...))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// Scenarios of hedged calls, each one call: the registry's outcome counts
// must say one success or one failure, never both, never neither.
func TestR124HedgedCallCounts(t *testing.T) {
	type step func(ctx context.Context, n int32) (int, error)
	slowOK := func(d time.Duration) func(ctx context.Context) (int, error) {
		return func(ctx context.Context) (int, error) {
			select {
			case <-time.After(d):
				return 1, nil
			case <-ctx.Done():
				return 0, ctx.Err()
			}
		}
	}
	_ = slowOK
	cases := []struct {
		name          string
		op            step
		wantOK        bool
		wantHedgedMin uint64
	}{
		{"hedge wins, first canceled", func(ctx context.Context, n int32) (int, error) {
			if n == 1 {
				<-ctx.Done()
				return 0, ctx.Err()
			}
			return 2, nil
		}, true, 1},
		{"first fails after hedge sent, hedge wins", func(ctx context.Context, n int32) (int, error) {
			if n == 1 {
				time.Sleep(15 * time.Millisecond)
				return 0, r124Err
			}
			time.Sleep(20 * time.Millisecond)
			return 2, nil
		}, true, 1},
		{"first fails, hedge fails, retry wins", func(ctx context.Context, n int32) (int, error) {
			if n <= 2 {
				time.Sleep(15 * time.Millisecond)
				return 0, r124Err
			}
			return 3, nil
		}, true, 1},
		{"first wins after hedge sent, hedge canceled", func(ctx context.Context, n int32) (int, error) {
			if n == 1 {
				time.Sleep(15 * time.Millisecond)
				return 1, nil
			}
			<-ctx.Done()
			return 0, ctx.Err()
		}, true, 1},
		{"all fail slowly", func(ctx context.Context, n int32) (int, error) {
			time.Sleep(15 * time.Millisecond)
			return 0, r124Err
		}, false, 1},
		{"hedge wins while first ignores cancel and fails", func(ctx context.Context, n int32) (int, error) {
			if n == 1 {
				time.Sleep(50 * time.Millisecond)
				return 0, r124Err
			}
			return 2, nil
		}, true, 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				r := registry.New()
				p := r124Pipe(t, r, "p")
				var n atomic.Int32
				_, err := pipeline.Do(context.Background(), p, func(ctx context.Context) (int, error) {
					return tc.op(ctx, n.Add(1))
				})
				if (err == nil) != tc.wantOK {
					t.Fatalf("err = %v", err)
				}
				time.Sleep(time.Second)
				synctest.Wait()
				s := r95State(t, r, p, "p")
				t.Logf("%+v", s)
				if s.Calls != 1 {
					t.Errorf("Calls = %d", s.Calls)
				}
				if tc.wantOK && (s.Successes != 1 || s.Failures != 0) || !tc.wantOK && (s.Successes != 0 || s.Failures != 1) {
					t.Errorf("Successes %d Failures %d, want ok=%v", s.Successes, s.Failures, tc.wantOK)
				}
				if s.Hedged < tc.wantHedgedMin {
					t.Errorf("Hedged = %d", s.Hedged)
				}
				if s.Rejected+s.Limited+s.Throttled != 0 {
					t.Errorf("refusals %+v", s)
				}
			})
		})
	}
}

// Panics and Goexit of a hedged attempt: a failure of one call.
func TestR124HedgedPanicCounts(t *testing.T) {
	for _, who := range []int32{1, 2} {
		for _, goexit := range []bool{false, true} {
			synctest.Test(t, func(t *testing.T) {
				r := registry.New()
				p := r124Pipe(t, r, "p")
				var n atomic.Int32
				done := make(chan any)
				go func() {
					defer func() { done <- recover() }()
					pipeline.Do(context.Background(), p, func(ctx context.Context) (int, error) {
						me := n.Add(1)
						if me == who {
							time.Sleep(15 * time.Millisecond)
							if goexit {
								runtime.Goexit()
							}
							panic("boom")
						}
						select {
						case <-time.After(40 * time.Millisecond):
							return 1, nil
						case <-ctx.Done():
							return 0, ctx.Err()
						}
					})
				}()
				v := <-done
				if !goexit && v == nil {
					t.Errorf("who=%d: no panic", who)
				}
				time.Sleep(time.Second)
				synctest.Wait()
				s := r95State(t, r, p, "p")
				t.Logf("who=%d goexit=%v: %+v", who, goexit, s)
				if s.Calls != 1 || s.Successes != 0 || s.Failures != 1 {
					t.Errorf("who=%d goexit=%v: Calls %d Successes %d Failures %d", who, goexit, s.Calls, s.Successes, s.Failures)
				}
			})
		}
	}
}

// A pipeline registered in two registries: each counts the calls through
// the pipeline it returned, which the other's wraps.
func TestR124TwoRegistries(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r1, r2 := registry.New(), registry.New()
		b := breaker.New("b124")
		p1, err := r1.AddPipeline(pipeline.New(pipeline.WithName("p"), pipeline.WithBreaker(b),
			pipeline.WithHedging(hedge.New(hedge.Delay(10*time.Millisecond), hedge.MaxShare(1))),
			pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(2)))))
		if err != nil {
			t.Fatal(err)
		}
		p2, err := r2.AddPipeline(p1)
		if err != nil {
			t.Fatal(err)
		}
		for i := range 10 {
			pipeline.Do(context.Background(), p2, func(ctx context.Context) (int, error) {
				if i%2 == 0 {
					time.Sleep(15 * time.Millisecond)
				}
				return 1, nil
			})
		}
		time.Sleep(time.Second)
		synctest.Wait()
		s1, s2 := r95State(t, r1, p1, "p"), r95State(t, r2, p2, "p")
		t.Logf("%+v\n%+v", s1, s2)
		for _, s := range []registry.PipelineState{s1, s2} {
			if s.Calls != 10 || s.Successes != 10 || s.Hedged < 5 {
				t.Errorf("%+v", s)
			}
		}
		runtime.KeepAlive(p1)
	})
}

// Hedges refused by the concurrency limit are no refusals of their calls:
// Limited must stay 0 while every call succeeds.
func TestR124HedgesAtLimitNotLimited(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := registry.New()
		l := limit.NewFixed(4)
		p := r124Pipe(t, r, "p", pipeline.WithLimit(l))
		var wg sync.WaitGroup
		var fails atomic.Int32
		for range 3 {
			wg.Go(func() {
				_, err := pipeline.Do(context.Background(), p, func(ctx context.Context) (int, error) {
					select {
					case <-time.After(30 * time.Millisecond):
						return 1, nil
					case <-ctx.Done():
						return 0, ctx.Err()
					}
				})
				if err != nil {
					fails.Add(1)
				}
			})
		}
		wg.Wait()
		time.Sleep(time.Second)
		synctest.Wait()
		s := r95State(t, r, p, "p")
		t.Logf("%+v", s)
		if fails.Load() != 0 || s.Limited != 0 || s.Successes != 3 || s.Failures != 0 {
			t.Errorf("fails %d, %+v", fails.Load(), s)
		}
	})
}
