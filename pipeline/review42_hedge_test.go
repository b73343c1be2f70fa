package pipeline_test

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/hedge"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/resilience"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

type review42Count struct {
	hedged atomic.Int64
}

func (c *review42Count) OnEvent(e resilience.Event) {
	if e.Kind == resilience.EventHedged {
		c.hedged.Add(1)
	}
}

// A hedge that fails with an error not to retry while the first attempt
// still runs: the docs say none is sent "once ... an attempt failed with
// an error that is not retried". Is hedge 2 sent?
func TestReview42NoHedgeAfterPermanentFailure(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	var n atomic.Int32
	var sent [8]atomic.Int32
	p := pipeline.New(pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(1))),
		pipeline.WithHedging(hedge.New(hedge.Delay(20*time.Millisecond), hedge.MaxExtra(3), hedge.MaxShare(1))))
	_, err := pipeline.Do(context.Background(), p, func(ctx context.Context) (int, error) {
		i := n.Add(1)
		sent[i].Store(1)
		if i == 1 {
			select {
			case <-ctx.Done():
				return 0, ctx.Err()
			case <-time.After(150 * time.Millisecond):
				return 1, nil
			}
		}
		return 0, resilience.Permanent(errors.New("bad request"))
	})
	t.Logf("attempts sent: %d, err %v", n.Load(), err)
	if n.Load() > 2 {
		t.Errorf("%d attempts: hedges went on after a hedge failed with an error not retried", n.Load())
	}
}

// A SingleAttempt call is never hedged, under load.
func TestReview42SingleAttemptNeverTwinned(t *testing.T) {
	var c review42Count
	p := pipeline.New(pipeline.WithRetry(retrypolicy.New()), pipeline.WithListener(&c),
		pipeline.WithHedging(hedge.New(hedge.Delay(time.Millisecond), hedge.MaxExtra(5), hedge.MaxShare(1))))
	var wg sync.WaitGroup
	var bad atomic.Int64
	for range 2000 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var runs atomic.Int32
			_, _ = pipeline.Do(context.Background(), p, func(ctx context.Context) (int, error) {
				if runs.Add(1) > 1 {
					bad.Add(1)
				}
				time.Sleep(10 * time.Millisecond)
				return 0, errors.New("transient")
			}, pipeline.SingleAttempt())
		}()
	}
	wg.Wait()
	if bad.Load() != 0 || c.hedged.Load() != 0 {
		t.Errorf("SingleAttempt calls ran twice: %d, hedges %d", bad.Load(), c.hedged.Load())
	}
}

// MaxShare under a storm of concurrent slow calls: hedges <= share*calls + 1
// (+1 where not a whole number).
func TestReview42MaxShareUnderConcurrency(t *testing.T) {
	for _, share := range []float64{0.01, 0.1, 0.5} {
		var c review42Count
		p := pipeline.New(pipeline.WithListener(&c),
			pipeline.WithHedging(hedge.New(hedge.Delay(time.Millisecond), hedge.MaxExtra(3), hedge.MaxShare(share))))
		const calls = 3000
		ops := review42Storm(p, calls, 30*time.Millisecond)
		limit := share*calls + 2
		t.Logf("share %v: %d calls, %d hedges (events), %d operations run", share, calls, c.hedged.Load(), ops)
		if float64(c.hedged.Load()) > limit || float64(ops-calls) > limit {
			t.Errorf("share %v: %d hedges for %d calls (limit %v)", share, c.hedged.Load(), calls, limit)
		}
	}
}

// A half-open breaker's probe gets no twin, even with several probe slots.
func TestReview42NoTwinOfProbe(t *testing.T) {
	b := breaker.New("dep", breaker.ConsecutiveFailures(1), breaker.OpenTimeout(30*time.Millisecond), breaker.HalfOpenRequests(5))
	var c review42Count
	p := pipeline.New(pipeline.WithBreaker(b), pipeline.WithRetry(retrypolicy.New()), pipeline.WithListener(&c),
		pipeline.WithHedging(hedge.New(hedge.Delay(time.Millisecond), hedge.MaxExtra(3), hedge.MaxShare(1))))
	_, _ = pipeline.Do(context.Background(), p, func(ctx context.Context) (int, error) { return 0, resilience.Terminal(errors.New("down")) })
	if b.State() != resilience.StateOpen {
		t.Fatalf("state %v", b.State())
	}
	time.Sleep(40 * time.Millisecond)
	var ops atomic.Int32
	var wg sync.WaitGroup
	for range 5 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _ = pipeline.Do(context.Background(), p, func(ctx context.Context) (int, error) {
				ops.Add(1)
				time.Sleep(30 * time.Millisecond)
				return 1, nil
			})
		}()
	}
	wg.Wait()
	t.Logf("probe calls 5, operations %d, hedges %d, state %v", ops.Load(), c.hedged.Load(), b.State())
	if c.hedged.Load() != 0 || ops.Load() > 5 {
		t.Errorf("a probe was twinned: %d ops, %d hedges", ops.Load(), c.hedged.Load())
	}
}

// The breaker opens while a first attempt runs: no hedge after.
func TestReview42NoHedgeOnceOpen(t *testing.T) {
	b := breaker.New("dep", breaker.ConsecutiveFailures(1), breaker.OpenTimeout(time.Minute))
	var c review42Count
	p := pipeline.New(pipeline.WithBreaker(b), pipeline.WithListener(&c),
		pipeline.WithHedging(hedge.New(hedge.Delay(20*time.Millisecond), hedge.MaxShare(1))))
	started := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = pipeline.Do(context.Background(), p, func(ctx context.Context) (int, error) {
			close(started)
			time.Sleep(60 * time.Millisecond)
			return 1, nil
		})
	}()
	<-started
	// another call fails and opens the breaker
	_, _ = pipeline.Do(context.Background(), p, func(ctx context.Context) (int, error) { return 0, resilience.Terminal(errors.New("x")) },
		pipeline.SingleAttempt())
	<-done
	if c.hedged.Load() != 0 {
		t.Errorf("hedge sent with the breaker open")
	}
}

// Hedges that panic or call runtime.Goexit: the caller sees it; no leak.
func TestReview42HedgePanicGoexit(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	p := pipeline.New(pipeline.WithHedging(hedge.New(hedge.Delay(5*time.Millisecond), hedge.MaxShare(1))))
	for _, mode := range []string{"panic", "goexit"} {
		var n atomic.Int32
		var got any
		exited := true
		done := make(chan struct{})
		go func() {
			defer close(done)
			defer func() { got = recover() }()
			_, _ = pipeline.Do(context.Background(), p, func(ctx context.Context) (int, error) {
				if n.Add(1) == 1 {
					<-ctx.Done() // cut by the hedge
					return 0, ctx.Err()
				}
				if mode == "panic" {
					panic("boom")
				}
				runtime.Goexit()
				return 0, nil
			})
			exited = false
		}()
		<-done
		t.Logf("%s: recovered %v, goexit %v", mode, got, exited && got == nil)
		if mode == "panic" && got != "boom" {
			t.Errorf("panic not carried: %v", got)
		}
		if mode == "goexit" && !(exited && got == nil) {
			t.Errorf("goexit not carried")
		}
	}
	time.Sleep(50 * time.Millisecond)
}

// A hedge wins while the first attempt ignores cancellation: the caller
// gets the hedge's answer once the first returns (documented).
func TestReview42WinnerWithStubbornFirst(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	var discarded atomic.Int32
	p := pipeline.New(pipeline.WithHedging(hedge.New(hedge.Delay(5*time.Millisecond), hedge.MaxShare(1))))
	var n atomic.Int32
	start := time.Now()
	v, err := pipeline.Do(context.Background(), p, func(ctx context.Context) (int, error) {
		if n.Add(1) == 1 {
			time.Sleep(100 * time.Millisecond) // ignores ctx
			return 1, nil
		}
		return 2, nil
	}, pipeline.Discard(func(int) { discarded.Add(1) }))
	el := time.Since(start)
	t.Logf("v=%d err=%v after %v discarded %d", v, err, el, discarded.Load())
	if v != 2 || err != nil {
		t.Errorf("got %d %v, want the hedge's 2", v, err)
	}
	if discarded.Load() != 1 {
		t.Errorf("loser's result discarded %d times", discarded.Load())
	}
}

// A caller deadline shorter than the hedge delay: the call ends on time.
func TestReview42DeadlineShorterThanDelay(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	var c review42Count
	p := pipeline.New(pipeline.WithRetry(retrypolicy.New()), pipeline.WithListener(&c),
		pipeline.WithHedging(hedge.New(hedge.Delay(50*time.Millisecond), hedge.MaxShare(1))))
	var wg sync.WaitGroup
	for range 500 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
			defer cancel()
			_, _ = pipeline.Do(ctx, p, func(ctx context.Context) (int, error) {
				<-ctx.Done()
				return 0, ctx.Err()
			})
		}()
	}
	wg.Wait()
	time.Sleep(60 * time.Millisecond)
	if c.hedged.Load() != 0 {
		t.Errorf("%d hedges sent after the caller's deadline", c.hedged.Load())
	}
}

// EventHedged says "attempt was sent as a hedge": is every hedge that ran
// reported, and are the hedges reported and not run (decided while their
// EventHedged was told: documented) few? (The budget of MaxShare is taken
// by each, too.)
func TestReview42HedgedEventsAreSent(t *testing.T) {
	var c review42Count
	p := pipeline.New(pipeline.WithListener(&c),
		pipeline.WithHedging(hedge.New(hedge.Delay(time.Millisecond), hedge.MaxShare(1))))
	const calls = 3000
	sent := review42Storm(p, calls, 10*time.Millisecond) - calls
	t.Logf("EventHedged %d, hedges run %d", c.hedged.Load(), sent)
	if h := c.hedged.Load(); h < sent || h > sent+sent/100 {
		t.Errorf("%d hedges reported, %d run: want at least those run, at most 1%% more", h, sent)
	}
}

// A hedge refused on our side (ClassRejected) or failing with an error not
// retried, the first attempt still running: are more hedges sent?
func TestReview42NoHedgeAfterRejectedHedge(t *testing.T) {
	for _, mk := range []func() error{
		func() error { return resilience.Rejected(errors.New("throttled")) },
		func() error { return resilience.Terminal(errors.New("500")) },
	} {
		var n atomic.Int32
		p := pipeline.New(pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(1))),
			pipeline.WithHedging(hedge.New(hedge.Delay(20*time.Millisecond), hedge.MaxExtra(3), hedge.MaxShare(1))))
		_, err := pipeline.Do(context.Background(), p, func(ctx context.Context) (int, error) {
			if n.Add(1) == 1 {
				select {
				case <-ctx.Done():
					return 0, ctx.Err()
				case <-time.After(150 * time.Millisecond):
					return 1, nil
				}
			}
			return 0, mk()
		})
		t.Logf("%v: attempts %d, err %v", mk(), n.Load(), err)
		if n.Load() > 2 {
			t.Errorf("%v: %d attempts: hedging went on after a hedge's %v", mk(), n.Load(), mk())
		}
	}
}

// The first attempt fails (retryable, with a result), then its hedge
// panics: is the first's result given to Discard?
func TestReview42DiscardWhenHedgePanics(t *testing.T) {
	var discarded atomic.Int32
	p := pipeline.New(pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(1))),
		pipeline.WithHedging(hedge.New(hedge.Delay(5*time.Millisecond), hedge.MaxShare(1))))
	var n atomic.Int32
	hedged := make(chan struct{})
	func() {
		defer func() { recover() }()
		_, _ = pipeline.Do(context.Background(), p, func(ctx context.Context) (int, error) {
			if n.Add(1) == 1 {
				<-hedged // the hedge is out, however late a loaded machine sends it
				return 7, errors.New("transient")
			}
			close(hedged)
			time.Sleep(20 * time.Millisecond)
			panic("boom")
		}, pipeline.Discard(func(v int) {
			if v == 7 {
				discarded.Add(1)
			}
		}))
	}()
	time.Sleep(50 * time.Millisecond)
	if discarded.Load() != 1 {
		t.Errorf("the first attempt's result was discarded %d times; want 1", discarded.Load())
	}
}

// review42Storm makes calls through p at once, each operation answering
// in d or when canceled, and returns how many operations ran (attempts
// and hedges).
func review42Storm(p *pipeline.Pipeline, calls int, d time.Duration) int64 {
	var wg sync.WaitGroup
	var ops atomic.Int64
	start := make(chan struct{})
	for range calls {
		wg.Go(func() {
			<-start
			_, _ = pipeline.Do(context.Background(), p, func(ctx context.Context) (int, error) {
				ops.Add(1)
				select {
				case <-ctx.Done():
				case <-time.After(d):
				}
				return 1, nil
			})
		})
	}
	close(start)
	wg.Wait()
	return ops.Load()
}
