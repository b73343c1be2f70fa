package pipeline_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/hedge"
	"github.com/resiliencekit/resiliencekit/limit"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/resilience"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
	"github.com/resiliencekit/resiliencekit/throttle"
)

// r60perr is a typed nil whose Unwrap and ResilienceClass dereference it.
type r60perr struct{ inner error }

func (e *r60perr) Error() string                     { return "r60perr" }
func (e *r60perr) Unwrap() error                     { return e.inner }
func (e *r60perr) ResilienceClass() resilience.Class { _ = e.inner; return resilience.ClassTransient }

// r60iserr panics in Is only.
type r60iserr struct{ p *int }

func (e *r60iserr) Error() string        { return "r60iserr" }
func (e *r60iserr) Is(target error) bool { return *e.p == 0 }

func TestReview60PanickingErrorsFullPipeline(t *testing.T) {
	errs := []func() error{
		func() error { var e *r60perr; return e },
		func() error { return &r60iserr{} },
		func() error { var e *r60perr; return errors.Join(errors.New("x"), e) },
	}
	for i, mk := range errs {
		l := limit.NewAIMD(limit.Initial(4), limit.Max(4), limit.MaxWaiting(100))
		th := throttle.New()
		b := breaker.New("r60", breaker.ConsecutiveFailures(1000))
		p := pipeline.New(
			pipeline.WithBreaker(b),
			pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(3), retrypolicy.BaseDelay(time.Millisecond),
				retrypolicy.RetryIf(func(error) bool { return true }))),
			pipeline.WithLimit(l), pipeline.WithThrottle(th),
			pipeline.WithHedging(hedge.New(hedge.Delay(2*time.Millisecond), hedge.MaxExtra(2))),
			pipeline.WithAttemptTimeout(200*time.Millisecond),
		)
		var wg sync.WaitGroup
		var panics atomic.Int64
		for g := 0; g < 40; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer func() {
					if r := recover(); r != nil {
						panics.Add(1)
					}
				}()
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				defer cancel()
				_, _ = pipeline.Do(ctx, p, func(ctx context.Context) (int, error) {
					time.Sleep(3 * time.Millisecond)
					return 0, mk()
				})
			}()
		}
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatalf("case %d: calls hung", i)
		}
		t.Logf("case %d: %d callers saw a panic (recoverable, caller goroutine)", i, panics.Load())
		if n := l.InFlight(); n != 0 {
			t.Errorf("case %d: limit in flight %d after all calls", i, n)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		v, err := pipeline.Do(ctx, p, func(ctx context.Context) (int, error) { return 7, nil })
		cancel()
		if err != nil || v != 7 {
			t.Errorf("case %d: healthy call after: %v %v (limit %d)", i, v, err, l.Limit())
		}
	}
}

// A hedge refused at a full limit must not fail the call, nor leak a slot.
func TestReview60HedgeRefusedAtFullLimit(t *testing.T) {
	for _, mode := range []string{"success", "retryable-then-ok", "terminal"} {
		l := limit.NewFixed(1, limit.MaxWaiting(10))
		var events sync.Map
		p := pipeline.New(
			pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(3), retrypolicy.BaseDelay(time.Millisecond))),
			pipeline.WithLimit(l),
			pipeline.WithHedging(hedge.New(hedge.Delay(5*time.Millisecond), hedge.MaxExtra(2))),
			pipeline.WithListener(resilience.ListenerFunc(func(e resilience.Event) {
				v, _ := events.LoadOrStore(e.Kind, new(atomic.Int64))
				v.(*atomic.Int64).Add(1)
			})),
		)
		var n atomic.Int64
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		v, err := pipeline.Do(ctx, p, func(ctx context.Context) (int, error) {
			k := n.Add(1)
			select {
			case <-time.After(30 * time.Millisecond):
			case <-ctx.Done():
				return 0, ctx.Err()
			}
			switch mode {
			case "retryable-then-ok":
				if k == 1 {
					return 0, errors.New("503")
				}
			case "terminal":
				return 0, resilience.Terminal(errors.New("bad"))
			}
			return int(k), nil
		})
		cancel()
		var kinds []string
		events.Range(func(k, v any) bool {
			kinds = append(kinds, k.(resilience.EventKind).String()+"="+itoa(v.(*atomic.Int64).Load()))
			return true
		})
		t.Logf("%s: v=%d err=%v attempts=%d events=%v", mode, v, err, n.Load(), kinds)
		switch mode {
		case "terminal":
			if err == nil || errors.Is(err, limit.ErrLimited) {
				t.Errorf("%s: err %v", mode, err)
			}
		default:
			if err != nil {
				t.Errorf("%s: call failed: %v", mode, err)
			}
		}
		time.Sleep(50 * time.Millisecond)
		if l.InFlight() != 0 {
			t.Errorf("%s: in flight %d", mode, l.InFlight())
		}
	}
}

func itoa(n int64) string {
	return string(rune('0' + n%10)) // small counts only
}

// Hedges under contention: many calls on a small limit, each hedged; no
// call may fail with the limit's refusal of its hedge, no slot leaks.
func TestReview60HedgesContention(t *testing.T) {
	l := limit.NewFixed(4, limit.MaxWaiting(1000))
	p := pipeline.New(
		pipeline.WithLimit(l),
		pipeline.WithHedging(hedge.New(hedge.Delay(time.Millisecond), hedge.MaxExtra(3))),
	)
	var wg sync.WaitGroup
	var failed atomic.Int64
	var firstErr atomic.Value
	for g := 0; g < 200; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_, err := pipeline.Do(ctx, p, func(ctx context.Context) (int, error) {
				d := time.Duration(1+g%5) * time.Millisecond
				select {
				case <-time.After(d):
					return 1, nil
				case <-ctx.Done():
					return 0, ctx.Err()
				}
			})
			if err != nil {
				failed.Add(1)
				firstErr.CompareAndSwap(nil, err)
			}
		}(g)
	}
	wg.Wait()
	if failed.Load() > 0 {
		t.Errorf("%d of 200 calls failed; first: %v", failed.Load(), firstErr.Load())
	}
	if l.InFlight() != 0 || l.Waiting() != 0 {
		t.Errorf("in flight %d waiting %d", l.InFlight(), l.Waiting())
	}
}
