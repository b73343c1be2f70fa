package pipeline_test

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

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/hedge"
	"github.com/resiliencekit/resiliencekit/limit"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/resilience"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
	"github.com/resiliencekit/resiliencekit/throttle"
)

var r150err503 = errors.New("503 service unavailable")

// Every slot and ticket comes back, whatever the operation does.
func TestReview150PipelineSlotsComeBack(t *testing.T) {
	type mk struct {
		name string
		l    func() *limit.Limiter
		opts []pipeline.Option
	}
	for _, m := range []mk{
		{"fixed", func() *limit.Limiter { return limit.NewFixed(8, limit.MaxWaiting(16)) }, nil},
		{"aimd", func() *limit.Limiter { return limit.NewAIMD(limit.Initial(8), limit.MaxWaiting(16)) }, nil},
		{"aimd-budget-timeout", func() *limit.Limiter { return limit.NewAIMD(limit.Initial(8), limit.Max(8), limit.MaxWaiting(4)) },
			[]pipeline.Option{pipeline.WithTimeBudget(30 * time.Millisecond), pipeline.WithAttemptTimeout(5 * time.Millisecond)}},
		{"slow-tracer", func() *limit.Limiter { return limit.NewFixed(8, limit.MaxWaiting(16)) },
			[]pipeline.Option{pipeline.WithTracer(r150tracer{}), pipeline.WithListener(r150listener{})}},
		{"hostile-tracer", func() *limit.Limiter { return limit.NewAIMD(limit.Initial(8), limit.MaxWaiting(16)) },
			[]pipeline.Option{pipeline.WithTimeBudget(20 * time.Millisecond), pipeline.WithTracer(r150tracer{hostile: true}), pipeline.WithListener(r150listener{hostile: true})}},
		{"breaker-wait", func() *limit.Limiter { return limit.NewFixed(8, limit.MaxWaiting(16)) },
			[]pipeline.Option{pipeline.WithTimeBudget(40 * time.Millisecond), pipeline.WithBreaker(breaker.New("r150", breaker.ConsecutiveFailures(4), breaker.OpenTimeout(5*time.Millisecond))), pipeline.WaitWhenOpen()}},
	} {
		t.Run(m.name, func(t *testing.T) {
			l := m.l()
			th := throttle.New(throttle.Window(100 * time.Millisecond))
			opts := append([]pipeline.Option{
				pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(3), retrypolicy.BaseDelay(100*time.Microsecond), retrypolicy.MaxDelay(time.Millisecond))),
				pipeline.WithHedging(hedge.New(hedge.Delay(200*time.Microsecond), hedge.MaxShare(0.5))),
				pipeline.WithThrottle(th),
				pipeline.WithLimit(l),
			}, m.opts...)
			p := pipeline.New(opts...)
			var wg sync.WaitGroup
			var n atomic.Int64
			deadline := time.Now().Add(500 * time.Millisecond)
			for g := range 24 {
				wg.Go(func() {
					for i := 0; time.Now().Before(deadline); i++ {
						kind := (g*7 + i) % 12
						n.Add(1)
						op := func(ctx context.Context) (int, error) {
							switch kind {
							case 0:
								panic("boom")
							case 1:
								runtime.Goexit()
							case 2: // returns after its context ended
								<-ctx.Done()
								time.Sleep(200 * time.Microsecond)
								return 0, r150err503
							case 3: // slow, so hedged
								select {
								case <-ctx.Done():
									return 0, ctx.Err()
								case <-time.After(time.Millisecond):
								}
								return 1, nil
							case 4:
								if i%2 == 0 {
									return 0, r150err503
								}
								return 1, nil
							case 5:
								return 0, resilience.Permanent(errors.New("400"))
							case 9, 10, 11: // slow, so hedged, then the twins panic or exit
								time.Sleep(time.Millisecond)
								if kind == 9 {
									panic("late boom")
								}
								if kind == 10 {
									runtime.Goexit()
								}
								<-ctx.Done()
								return 0, r150err503
							}
							return 1, nil
						}
						ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
						if kind == 6 {
							go func() { time.Sleep(100 * time.Microsecond); cancel() }()
						}
						done := make(chan struct{})
						go func() {
							defer close(done)
							defer func() { recover() }()
							if kind == 7 || kind == 8 {
								_, rel, _ := pipeline.DoStream(ctx, p, op)
								time.Sleep(100 * time.Microsecond)
								rel()
								return
							}
							pipeline.Do(ctx, p, op)
						}()
						<-done
						cancel()
					}
				})
			}
			wg.Wait()
			// Let any hedge goroutine still out finish.
			for i := 0; i < 200 && (l.InFlight() != 0 || l.Waiting() != 0); i++ {
				time.Sleep(5 * time.Millisecond)
			}
			for i := 0; i < 200 && p.Waiting() != 0; i++ {
				time.Sleep(5 * time.Millisecond)
			}
			if l.InFlight() != 0 || l.Waiting() != 0 || p.Waiting() != 0 {
				t.Fatalf("after %d calls: in flight %d, waiting %d, pipeline's backlog %d", n.Load(), l.InFlight(), l.Waiting(), p.Waiting())
			}
			lim := l.Limit()
			var tks []limit.Ticket
			for range lim {
				tk, err := l.Acquire(context.Background())
				if err != nil {
					t.Fatalf("capacity %d not usable after the calls: %d taken", lim, len(tks))
				}
				tks = append(tks, tk)
			}
			for _, tk := range tks {
				l.Release(tk, context.Canceled)
			}
			t.Logf("%d calls, limit %d at the end", n.Load(), lim)
			if b := p.Stages().Breaker; b != nil {
				t.Logf("breaker %v", b.State())
			}
		})
	}
}

// A call queued at the limit never waits beyond its context or the time
// budget.
func TestReview150QueuedCallBoundedByBudget(t *testing.T) {
	type cfg struct {
		name     string
		opts     []pipeline.Option
		callerDL time.Duration
		bound    time.Duration
	}
	for _, c := range []cfg{
		{"budget", []pipeline.Option{pipeline.WithTimeBudget(50 * time.Millisecond)}, time.Hour, 50 * time.Millisecond},
		{"budget+retry", []pipeline.Option{pipeline.WithTimeBudget(50 * time.Millisecond), pipeline.WithRetry(retrypolicy.New())}, time.Hour, 50 * time.Millisecond},
		{"budget+breaker", []pipeline.Option{pipeline.WithTimeBudget(50 * time.Millisecond), pipeline.WithBreaker(breaker.New("q"))}, time.Hour, 50 * time.Millisecond},
		{"budget+breaker+wait", []pipeline.Option{pipeline.WithTimeBudget(50 * time.Millisecond), pipeline.WithBreaker(breaker.New("q")), pipeline.WaitWhenOpen()}, time.Hour, 50 * time.Millisecond},
		{"caller", []pipeline.Option{pipeline.WithRetry(retrypolicy.New())}, 30 * time.Millisecond, 30 * time.Millisecond},
		{"caller+budget+hedge", []pipeline.Option{pipeline.WithTimeBudget(time.Second), pipeline.WithHedging(hedge.New(hedge.Delay(time.Millisecond)))}, 30 * time.Millisecond, 30 * time.Millisecond},
		{"budget+timeout+hedge", []pipeline.Option{pipeline.WithTimeBudget(50 * time.Millisecond), pipeline.WithAttemptTimeout(10 * time.Millisecond), pipeline.WithRetry(retrypolicy.New()), pipeline.WithHedging(hedge.New(hedge.Delay(time.Millisecond)))}, time.Hour, 50 * time.Millisecond},
	} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				l := limit.NewFixed(2, limit.MaxWaiting(100))
				p := pipeline.New(append(c.opts, pipeline.WithLimit(l))...)
				var hold []limit.Ticket
				for range 2 {
					tk, _ := l.Acquire(context.Background())
					hold = append(hold, tk)
				}
				var wg sync.WaitGroup
				for i := range 20 {
					wg.Go(func() {
						ctx, cancel := context.WithTimeout(context.Background(), c.callerDL)
						defer cancel()
						start := time.Now()
						_, err := pipeline.Do(ctx, p, func(ctx context.Context) (int, error) { return 1, nil })
						if took := time.Since(start); took > c.bound {
							t.Errorf("call %d waited %v, past %v (err %v)", i, took, c.bound, err)
						}
						if err == nil {
							t.Errorf("call %d got through a full limit", i)
						}
					})
					time.Sleep(time.Millisecond)
				}
				wg.Wait()
				if l.Waiting() != 0 || l.InFlight() != 2 {
					t.Errorf("waiting %d, in flight %d (2 held)", l.Waiting(), l.InFlight())
				}
				for _, tk := range hold {
					l.Release(tk, nil)
				}
			})
		})
	}
}

// The caller's own deadline or cancel, even when the client turns it into
// a transient error of its own, never teaches the limit or the throttle.
func TestReview150CallerEndsTeachNothing(t *testing.T) {
	type cfg struct {
		name string
		opts []pipeline.Option
	}
	for _, c := range []cfg{
		{"plain", nil},
		{"retry", []pipeline.Option{pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(3)))}},
		{"budget-longer", []pipeline.Option{pipeline.WithTimeBudget(time.Second)}},
		{"attempt-timeout-longer", []pipeline.Option{pipeline.WithAttemptTimeout(time.Second)}},
		{"budget+timeout+retry", []pipeline.Option{pipeline.WithTimeBudget(time.Second), pipeline.WithAttemptTimeout(500 * time.Millisecond), pipeline.WithRetry(retrypolicy.New())}},
		{"breaker+budget", []pipeline.Option{pipeline.WithTimeBudget(time.Second), pipeline.WithBreaker(breaker.New("c"))}},
		{"breaker+wait+budget", []pipeline.Option{pipeline.WithTimeBudget(time.Second), pipeline.WithBreaker(breaker.New("c")), pipeline.WaitWhenOpen()}},
		{"hedge", []pipeline.Option{pipeline.WithHedging(hedge.New(hedge.Delay(5 * time.Millisecond)))}},
	} {
		for _, how := range []string{"deadline", "cancel"} {
			t.Run(c.name+"/"+how, func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					l := limit.NewAIMD(limit.Initial(10))
					th := throttle.New(throttle.Window(time.Second))
					p := pipeline.New(append(c.opts, pipeline.WithLimit(l), pipeline.WithThrottle(th))...)
					var refused atomic.Int64
					var wg sync.WaitGroup
					for g := range 10 {
						wg.Go(func() {
							for i := range 30 {
								ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
								if how == "cancel" {
									ctx, cancel = context.WithCancel(context.Background())
									go func() { time.Sleep(20 * time.Millisecond); cancel() }()
								}
								_, err := pipeline.Do(ctx, p, func(ctx context.Context) (int, error) {
									<-ctx.Done()
									// a client whose socket deadline fired: not ctx.Err()
									return 0, fmt.Errorf("read tcp: i/o timeout (g%d i%d)", g, i)
								})
								if errors.Is(err, limit.ErrLimited) || errors.Is(err, throttle.ErrThrottled) {
									refused.Add(1)
								}
								cancel()
							}
						})
					}
					wg.Wait()
					if got := l.Limit(); got < 10 || refused.Load() > 0 || th.RejectProbability() > 0 {
						t.Errorf("caller's ends taught: limit %d (from 10), %d refused, throttle p %v", got, refused.Load(), th.RejectProbability())
					}
				})
			})
		}
	}
}

// Do no harm: a healthy 10 ms dependency, bursts of 300 callers after
// lulls, with an AIMD limit that queues and budgets with room: every call
// completes.
func TestReview150BurstsAfterLullsAllComplete(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := limit.NewAIMD(limit.MaxWaiting(1000))
		th := throttle.New()
		p := pipeline.New(pipeline.WithTimeBudget(time.Second), pipeline.WithLimit(l), pipeline.WithThrottle(th),
			pipeline.WithRetry(retrypolicy.New()), pipeline.WithHedging(hedge.New()))
		failed := 0
		var mu sync.Mutex
		for round := range 5 {
			var wg sync.WaitGroup
			for i := range 300 {
				wg.Go(func() {
					_, err := pipeline.Do(context.Background(), p, func(ctx context.Context) (int, error) {
						d := 10 * time.Millisecond
						if i == 0 {
							d = 300 * time.Millisecond // one slow call among fast ones
						}
						select {
						case <-time.After(d):
							return 1, nil
						case <-ctx.Done():
							return 0, ctx.Err()
						}
					})
					if err != nil {
						mu.Lock()
						failed++
						mu.Unlock()
					}
				})
			}
			wg.Wait()
			time.Sleep(time.Duration(round+1) * time.Minute)
		}
		if failed > 0 {
			t.Errorf("%d of 1500 calls to a healthy dependency failed (limit %d)", failed, l.Limit())
		}
	})
}

type r150tracer struct{ hostile bool }

var r150n atomic.Int64

func (tr r150tracer) StartCall(ctx context.Context, name string) (context.Context, resilience.CallTrace) {
	return ctx, r150trace(tr)
}

type r150trace struct{ hostile bool }

func (tr r150trace) StartAttempt(ctx context.Context, a resilience.AttemptInfo) (context.Context, func(error)) {
	time.Sleep(150 * time.Microsecond) // widen the gap between the gates and the send
	if tr.hostile {
		switch r150n.Add(1) % 23 {
		case 0:
			panic("tracer boom")
		case 7:
			runtime.Goexit()
		}
	}
	return ctx, func(error) {
		if tr.hostile && r150n.Add(1)%29 == 0 {
			panic("end boom")
		}
	}
}

func (r150trace) End(error) {}

type r150listener struct{ hostile bool }

func (l r150listener) OnEvent(e resilience.Event) {
	if e.Kind == resilience.EventHedged {
		time.Sleep(100 * time.Microsecond)
		if l.hostile && r150n.Add(1)%17 == 0 {
			panic("listener boom")
		}
	}
}
