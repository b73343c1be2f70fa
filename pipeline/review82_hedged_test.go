package pipeline_test

import (
	"context"
	"errors"
	"fmt"
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
	"github.com/resiliencekit/resiliencekit/retrysignal"
)

type r82Err struct{ msg string }

func (e *r82Err) Error() string { return e.msg }

var r82Transient = errors.New("r82 transient")

// r82Op: first attempts (not hedges) sleep slow, hedges sleep hslow; counts.
type r82Op struct {
	p            *pipeline.Pipeline
	slow, hslow  time.Duration
	firstErr     error
	hedgeErr     error
	firsts, hdgs atomic.Int32
}

func (o *r82Op) run(ctx context.Context) (int, error) {
	if o.p.IsHedge(ctx) {
		o.hdgs.Add(1)
		select {
		case <-time.After(o.hslow):
		case <-ctx.Done():
			return 0, ctx.Err()
		}
		return 0, o.hedgeErr
	}
	n := o.firsts.Add(1)
	d := o.slow
	if n > 1 {
		d = time.Millisecond
	}
	select {
	case <-time.After(d):
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	return 0, o.firstErr
}

func r82CheckChain(t *testing.T, err, orig error) {
	t.Helper()
	if !errors.Is(err, orig) {
		t.Errorf("errors.Is(err, orig) false: %v", err)
	}
	var re *retrypolicy.Error
	_ = errors.As(err, &re)
	if resilience.Classify(err) != resilience.Classify(orig) {
		t.Errorf("Classify %v, want %v", resilience.Classify(err), resilience.Classify(orig))
	}
}

func TestReview82_HedgeSentMarked(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts []pipeline.Option
	}{
		{"max1", []pipeline.Option{pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(1)))}},
		{"noretry", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				for _, hedgeWins := range []bool{false, true} {
					orig := &r82Err{"first"}
					herr := &r82Err{"hedge"}
					o := &r82Op{slow: 50 * time.Millisecond, hslow: 5 * time.Millisecond,
						firstErr: orig, hedgeErr: herr}
					if hedgeWins {
						o.hslow = 100 * time.Millisecond
					}
					opts := append([]pipeline.Option{pipeline.WithHedging(hedge.New(hedge.Delay(10*time.Millisecond), hedge.MaxShare(1)))}, tc.opts...)
					o.p = pipeline.New(opts...)
					_, err := pipeline.Do(context.Background(), o.p, o.run)
					if o.hdgs.Load() != 1 {
						t.Fatalf("hedges %d", o.hdgs.Load())
					}
					if !pipeline.Hedged(err) || !retrysignal.Retried(err) {
						t.Errorf("hedge sent; Hedged=%v Retried=%v err=%v", pipeline.Hedged(err), retrysignal.Retried(err), err)
					}
					var e *r82Err
					if !errors.As(err, &e) {
						t.Errorf("As lost: %v", err)
					}
					// message unchanged: compare to the same call without hedging
					p2 := pipeline.New(tc.opts...)
					_, err2 := pipeline.Do(context.Background(), p2, func(context.Context) (int, error) { return 0, e })
					if err.Error() != err2.Error() {
						t.Errorf("message %q, unhedged %q", err.Error(), err2.Error())
					}
					if resilience.Classify(err) != resilience.Classify(err2) {
						t.Errorf("class %v vs %v", resilience.Classify(err), resilience.Classify(err2))
					}
					var re1, re2 *retrypolicy.Error
					if errors.As(err, &re1) != errors.As(err2, &re2) {
						t.Errorf("retrypolicy.Error found differs")
					}
				}
			})
		})
	}
}

// Several attempts; only the first hedged; the last attempt's error returned.
func TestReview82_EarlyAttemptHedgedLaterReturned(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		o := &r82Op{slow: 50 * time.Millisecond, hslow: 60 * time.Millisecond, firstErr: r82Transient, hedgeErr: r82Transient}
		o.p = pipeline.New(pipeline.WithHedging(hedge.New(hedge.Delay(10*time.Millisecond), hedge.MaxShare(1))),
			pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(3), retrypolicy.BaseDelay(time.Millisecond))))
		_, err := pipeline.Do(context.Background(), o.p, o.run)
		t.Logf("firsts=%d hedges=%d Hedged=%v Retried=%v err=%v", o.firsts.Load(), o.hdgs.Load(), pipeline.Hedged(err), retrysignal.Retried(err), err)
		if !retrysignal.Retried(err) {
			t.Errorf("not Retried")
		}
		if o.hdgs.Load() > 0 && !pipeline.Hedged(err) {
			t.Errorf("the call sent a hedge, Hedged(err) false (doc: 'the error of a call ... that sent a hedge')")
		}
	})
}

// A hedge due but not sent: budget spent (MaxShare).
func TestReview82_BudgetSpentNotMarked(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		o := &r82Op{slow: 50 * time.Millisecond, hslow: 5 * time.Millisecond, firstErr: r82Transient, hedgeErr: r82Transient}
		o.p = pipeline.New(pipeline.WithHedging(hedge.New(hedge.Delay(10*time.Millisecond), hedge.MaxShare(0.01))),
			pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(1))))
		for i := 0; i < 6; i++ {
			before := o.hdgs.Load()
			o.firsts.Store(0)
			_, err := pipeline.Do(context.Background(), o.p, o.run)
			sent := o.hdgs.Load() - before
			if (sent > 0) != pipeline.Hedged(err) {
				t.Errorf("call %d: hedges sent %d, Hedged %v", i, sent, pipeline.Hedged(err))
			}
		}
	})
}

// A hedge due while the breaker is open: not sent, not marked.
func TestReview82_BreakerOpenNotMarked(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := breaker.New("r82", breaker.ConsecutiveFailures(1), breaker.OpenTimeout(time.Hour))
		o := &r82Op{slow: 50 * time.Millisecond, hslow: 5 * time.Millisecond, firstErr: r82Transient, hedgeErr: r82Transient}
		o.p = pipeline.New(pipeline.WithHedging(hedge.New(hedge.Delay(10*time.Millisecond), hedge.MaxShare(1))),
			pipeline.WithBreaker(b), pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(1))))
		go func() { // another call fails at 5ms: opens the breaker
			pipeline.Do(context.Background(), o.p, func(context.Context) (int, error) {
				time.Sleep(5 * time.Millisecond)
				return 0, r82Transient
			})
		}()
		_, err := pipeline.Do(context.Background(), o.p, o.run)
		if o.hdgs.Load() != 0 {
			t.Fatalf("hedge sent with breaker open")
		}
		if pipeline.Hedged(err) {
			t.Errorf("no hedge sent, marked: %v", err)
		}
	})
}

// A hedge refused by a limit gate: not marked.
func TestReview82_LimitRefusesHedgeNotMarked(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := limit.NewFixed(1, limit.MaxWaiting(0))
		o := &r82Op{slow: 50 * time.Millisecond, hslow: 5 * time.Millisecond, firstErr: r82Transient, hedgeErr: r82Transient}
		o.p = pipeline.New(pipeline.WithHedging(hedge.New(hedge.Delay(10*time.Millisecond), hedge.MaxShare(1))),
			pipeline.WithLimit(l), pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(1))))
		_, err := pipeline.Do(context.Background(), o.p, o.run)
		t.Logf("hedges %d err %v", o.hdgs.Load(), err)
		if o.hdgs.Load() == 0 && pipeline.Hedged(err) {
			t.Errorf("no hedge sent, marked: %v", err)
		}
	})
}

// The race decided (an answer not to retry) before the hedge went out.
func TestReview82_DecidedBeforeHedge(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		perm := resilience.Permanent(errors.New("r82 perm"))
		o := &r82Op{slow: 9 * time.Millisecond, hslow: 5 * time.Millisecond, firstErr: perm, hedgeErr: perm}
		o.p = pipeline.New(pipeline.WithHedging(hedge.New(hedge.Delay(10*time.Millisecond), hedge.MaxShare(1))),
			pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(1))))
		_, err := pipeline.Do(context.Background(), o.p, o.run)
		if o.hdgs.Load() != 0 || pipeline.Hedged(err) {
			t.Errorf("hedges %d Hedged %v", o.hdgs.Load(), pipeline.Hedged(err))
		}
		// caller's context canceled before the hedge
		ctx, cancel := context.WithCancel(context.Background())
		o2 := &r82Op{slow: 50 * time.Millisecond, hslow: 5 * time.Millisecond, firstErr: r82Transient, hedgeErr: r82Transient}
		o2.p = o.p
		time.AfterFunc(5*time.Millisecond, cancel)
		_, err = pipeline.Do(ctx, o2.p, o2.run)
		if o2.hdgs.Load() != 0 || pipeline.Hedged(err) {
			t.Errorf("canceled: hedges %d Hedged %v", o2.hdgs.Load(), pipeline.Hedged(err))
		}
	})
}

// Nested: the inner pipeline hedges; the outer's error says so.
func TestReview82_Nested(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		o := &r82Op{slow: 50 * time.Millisecond, hslow: 5 * time.Millisecond, firstErr: r82Transient, hedgeErr: r82Transient}
		o.p = pipeline.New(pipeline.WithHedging(hedge.New(hedge.Delay(10*time.Millisecond), hedge.MaxShare(1))),
			pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(1))))
		outer := pipeline.New(pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(1))))
		_, err := pipeline.Do(context.Background(), outer, func(ctx context.Context) (int, error) {
			return pipeline.Do(ctx, o.p, o.run)
		})
		if !pipeline.Hedged(err) || !retrysignal.Retried(err) {
			t.Errorf("nested: Hedged %v Retried %v", pipeline.Hedged(err), retrysignal.Retried(err))
		}
		// outer hedges, inner does not: hedge of outer makes a call through inner
		o3 := &r82Op{slow: 50 * time.Millisecond, hslow: 5 * time.Millisecond, firstErr: r82Transient, hedgeErr: r82Transient}
		inner := pipeline.New(pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(1))))
		o3.p = pipeline.New(pipeline.WithHedging(hedge.New(hedge.Delay(10*time.Millisecond), hedge.MaxShare(1))))
		_, err = pipeline.Do(context.Background(), o3.p, func(ctx context.Context) (int, error) {
			return pipeline.Do(ctx, inner, o3.run)
		})
		if o3.hdgs.Load() != 1 || !pipeline.Hedged(err) {
			t.Errorf("outer hedged: hedges %d Hedged %v", o3.hdgs.Load(), pipeline.Hedged(err))
		}
	})
}

// Spare reuse: many goroutines, random hedged / unhedged calls: the mark
// must follow the call's own hedges. Real time, -race.
func TestReview82_SpareNoStaleMark(t *testing.T) {
	p := pipeline.New(pipeline.WithHedging(hedge.New(hedge.Delay(2*time.Millisecond), hedge.MaxShare(1))),
		pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(1))))
	var wg sync.WaitGroup
	var bad, marked, total atomic.Int32
	for g := 0; g < 32; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; i < 200; i++ {
				var hedges atomic.Int32
				slow := (g+i)%3 == 0
				_, err := pipeline.Do(context.Background(), p, func(ctx context.Context) (int, error) {
					if p.IsHedge(ctx) {
						hedges.Add(1)
						return 0, r82Transient
					}
					if slow {
						time.Sleep(6 * time.Millisecond)
					}
					return 0, r82Transient
				})
				total.Add(1)
				h := pipeline.Hedged(err)
				if h {
					marked.Add(1)
				}
				if h != (hedges.Load() > 0) {
					bad.Add(1)
					if bad.Load() < 5 {
						t.Logf("g%d i%d: hedges %d Hedged %v", g, i, hedges.Load(), h)
					}
				}
			}
		}(g)
	}
	wg.Wait()
	t.Logf("%d calls, %d marked", total.Load(), marked.Load())
	if bad.Load() > 0 {
		t.Errorf("%d of %d calls: mark != hedges sent", bad.Load(), total.Load())
	}
}

var _ = fmt.Sprint
