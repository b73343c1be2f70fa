package otelevents_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.uber.org/goleak"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/hedge"
	"github.com/resiliencekit/resiliencekit/limit"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/resilience"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

// r44Panicky panics in OnStart and/or OnEnd, for spans whose name has
// suffix.
type r44Panicky struct {
	onStart, onEnd bool
	suffix         string
}

func (p r44Panicky) OnStart(_ context.Context, s sdktrace.ReadWriteSpan) {
	if p.onStart && strings.HasSuffix(s.Name(), p.suffix) {
		panic("processor OnStart")
	}
}

func (p r44Panicky) OnEnd(s sdktrace.ReadOnlySpan) {
	if p.onEnd && strings.HasSuffix(s.Name(), p.suffix) {
		panic("processor OnEnd")
	}
}
func (r44Panicky) Shutdown(context.Context) error   { return nil }
func (r44Panicky) ForceFlush(context.Context) error { return nil }

// A span processor that panics never changes a call's outcome, the
// breaker's counts, nor the attempts made.
func TestReview44_PanickingProcessor(t *testing.T) {
	for _, pp := range []r44Panicky{
		{onStart: true, suffix: " attempt"}, {onEnd: true, suffix: " attempt"},
		{onStart: true, suffix: ""}, {onEnd: true, suffix: ""}, {onStart: true, onEnd: true},
		{onStart: true, suffix: "h"}, {onEnd: true, suffix: "h"},
	} {
		t.Run(fmt.Sprintf("%+v", pp), func(t *testing.T) {
			run := func(traced bool) (outcomes []string, counts breaker.Counts, attempts int64) {
				b := breaker.New("h", breaker.ConsecutiveFailures(1000))
				opts := []pipeline.Option{pipeline.WithBreaker(b),
					pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(3), retrypolicy.BaseDelay(0))),
					pipeline.WithHedging(hedge.New(hedge.Delay(time.Millisecond), hedge.MaxShare(1)))}
				if traced {
					tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(pp))
					opts = append(opts, pipeline.WithTracer(newTracerFrom(tp)))
				}
				p := pipeline.New(opts...)
				var n atomic.Int64
				for i := range 30 {
					res, err := pipeline.Do(context.Background(), p, func(ctx context.Context) (int, error) {
						k := n.Add(1)
						if i%3 == 0 && k%2 == 1 {
							time.Sleep(3 * time.Millisecond) // hedged
						}
						if i%5 == 0 {
							return 0, errors.New("503")
						}
						return i, nil
					})
					outcomes = append(outcomes, fmt.Sprint(res, err != nil))
				}
				return outcomes, b.Counts(), n.Load()
			}
			plainOut, plainCounts, _ := run(false)
			out, counts, att := run(true)
			if fmt.Sprint(plainOut) != fmt.Sprint(out) {
				t.Errorf("outcomes changed:\n plain  %v\n traced %v", plainOut, out)
			}
			if plainCounts.Requests != counts.Requests || plainCounts.TotalFailures != counts.TotalFailures {
				t.Errorf("breaker counts changed: %+v vs %+v", plainCounts, counts)
			}
			_ = att
		})
	}
}

// r44SlowExporter takes d to export, or blocks until release is closed.
type r44SlowExporter struct {
	d       time.Duration
	release chan struct{}
}

func (e *r44SlowExporter) ExportSpans(ctx context.Context, _ []sdktrace.ReadOnlySpan) error {
	if e.release != nil {
		select {
		case <-e.release:
		case <-ctx.Done():
		}
		return nil
	}
	time.Sleep(e.d)
	return nil
}
func (e *r44SlowExporter) Shutdown(context.Context) error { return nil }

// A hanging exporter behind the batch processor (the production setup,
// which the package doc asks for) does not hold calls.
func TestReview44_SlowExporter(t *testing.T) {
	t.Run("batch-hanging", func(t *testing.T) {
		e := &r44SlowExporter{release: make(chan struct{})}
		tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(e, sdktrace.WithMaxQueueSize(64), sdktrace.WithExportTimeout(time.Hour)))
		defer func() { close(e.release); _ = tp.Shutdown(context.Background()) }()
		p := pipeline.New(pipeline.WithName("b"), pipeline.WithTracer(newTracerFrom(tp)),
			pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(2), retrypolicy.BaseDelay(0))))
		start := time.Now()
		for i := range 20000 {
			_, _ = pipeline.Do(context.Background(), p, func(context.Context) (int, error) {
				if i%2 == 0 {
					return 0, errors.New("x")
				}
				return 1, nil
			})
		}
		if el := time.Since(start); el > 5*time.Second {
			t.Errorf("20000 calls took %v behind a hanging batch exporter", el)
		} else {
			t.Logf("20000 calls in %v", el)
		}
	})
}

// r44BadErr is an error whose Error method panics on a nil receiver, as a
// careless typed error would. A plain client returns it untouched.
type r44BadErr struct{ msg *string }

func (e *r44BadErr) Error() string { return *e.msg }

// The operation returns an error whose Error() panics: the call's outcome
// is unchanged, and every span that started must still end.
func TestReview44_ErrorMethodPanics(t *testing.T) {
	r := newR44Rig()
	p := pipeline.New(pipeline.WithName("e"), pipeline.WithTracer(r.tracer),
		pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(2), retrypolicy.BaseDelay(0))))
	bad := &r44BadErr{}
	_, err := pipeline.Do(context.Background(), p, func(context.Context) (int, error) { return 0, bad })
	if !errors.Is(err, bad) {
		t.Fatalf("err %T", err)
	}
	r.watch.waitEnded(t, 200*time.Millisecond)
}

// One pipeline with both the Tracer and a Listener: the metrics and the
// spans tell the same story.
func TestReview44_TracerAndListener(t *testing.T) {
	r := newR44Rig()
	l, mr := r44Listener(t)
	p := pipeline.New(pipeline.WithName("both"), pipeline.WithTracer(r.tracer), pipeline.WithListener(l),
		pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(3), retrypolicy.BaseDelay(0))))
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 100 {
				n := 0
				_, _ = pipeline.Do(context.Background(), p, func(ctx context.Context) (int, error) {
					n++
					switch {
					case (g+i)%4 == 0 && n < 3:
						return 0, errors.New("503")
					case (g+i)%4 == 1:
						return 0, resilience.Permanent(errors.New("400"))
					}
					return 1, nil
				})
			}
		}()
	}
	wg.Wait()
	sums, _, _ := r44Collect(t, mr)
	trees := r.trees(t)
	calls, attempts := map[string]int64{}, map[string]int64{}
	for _, tr := range trees {
		calls["dependency=both,outcome="+r44Str(tr.call, "resilience.outcome")]++
		for _, a := range tr.attempts {
			attempts["dependency=both,outcome="+r44Str(a, "resilience.outcome")]++
		}
	}
	if fmt.Sprint(calls) != fmt.Sprint(sums["resilience.calls"]) || fmt.Sprint(attempts) != fmt.Sprint(sums["resilience.attempts"]) {
		t.Errorf("spans: calls %v attempts %v\nmetrics: calls %v attempts %v", calls, attempts, sums["resilience.calls"], sums["resilience.attempts"])
	}
}

// A hedge that a full concurrency limit refuses: it has no span, and the
// numbers of the attempt spans and the call's count, per the doc.
func TestReview44_RefusedHedgeNumbering(t *testing.T) {
	r := newR44Rig()
	l, mr := r44Listener(t)
	p := pipeline.New(pipeline.WithName("lim"), pipeline.WithTracer(r.tracer), pipeline.WithListener(l),
		pipeline.WithLimit(limit.NewFixed(1)),
		pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(2), retrypolicy.BaseDelay(0))),
		pipeline.WithHedging(hedge.New(hedge.Delay(2*time.Millisecond), hedge.MaxShare(1))))
	var n atomic.Int64
	_, err := pipeline.Do(context.Background(), p, func(ctx context.Context) (int, error) {
		if n.Add(1) == 1 {
			time.Sleep(20 * time.Millisecond) // the hedge comes, finds the limit full
			return 0, errors.New("503")
		}
		return 1, nil
	})
	tr := r.one(t)
	var nums []int64
	for _, a := range tr.attempts {
		nums = append(nums, r44Int(a, "resilience.attempt"))
	}
	sums, _, _ := r44Collect(t, mr)
	t.Logf("err %v; ops run %d; attempt spans numbered %v; call attempts=%d; metric attempts %v", err, n.Load(), nums, r44Int(tr.call, "resilience.attempts"), sums["resilience.attempts"])
	for i, k := range nums {
		if k != int64(i+1) {
			t.Errorf("attempt spans numbered %v: a number with no span (the refused hedge) in between", nums)
			break
		}
	}
}

// No goroutine is left behind by traced hedged calls, panics included.
func TestReview44_NoLeak(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	r := newR44Rig()
	p := pipeline.New(pipeline.WithName("leak"), pipeline.WithTracer(r.tracer),
		pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(2), retrypolicy.BaseDelay(0))),
		pipeline.WithHedging(hedge.New(hedge.Delay(time.Millisecond), hedge.MaxShare(1), hedge.MaxExtra(2))))
	for i := range 50 {
		func() {
			defer func() { _ = recover() }()
			var n atomic.Int64
			_, _ = pipeline.Do(context.Background(), p, func(ctx context.Context) (int, error) {
				k := n.Add(1)
				if k == 1 {
					select {
					case <-ctx.Done():
						return 0, ctx.Err()
					case <-time.After(5 * time.Millisecond):
					}
				}
				if i%7 == 0 && k == 2 {
					panic("x")
				}
				return 1, nil
			})
		}()
	}
	r.watch.waitEnded(t, time.Second)
	r.watch.check(t)
}

// WaitWhenOpen with a concurrency limit: an attempt that waited for a slot
// while the breaker opened is not sent, and the call waits for the
// breaker; the attempt span it then sends is numbered?
func TestReview44_WaitWhenOpenReopenedNumbering(t *testing.T) {
	r := newR44Rig()
	b := breaker.New("wo", breaker.ConsecutiveFailures(1), breaker.OpenTimeout(30*time.Millisecond))
	p := pipeline.New(pipeline.WithBreaker(b), pipeline.WithTracer(r.tracer), pipeline.WaitWhenOpen(),
		pipeline.WithLimit(limit.NewFixed(1, limit.MaxWaiting(4))), pipeline.WithTimeBudget(2*time.Second))
	hold := make(chan struct{})
	xdone := make(chan struct{})
	go func() {
		defer close(xdone)
		_, _ = pipeline.Do(context.Background(), p, func(context.Context) (int, error) {
			<-hold
			return 0, resilience.Terminal(errors.New("down")) // opens the breaker
		})
	}()
	time.Sleep(10 * time.Millisecond) // X holds the slot
	ydone := make(chan error)
	var yCtxs []string
	go func() {
		_, err := pipeline.Do(context.Background(), p, func(ctx context.Context) (int, error) {
			yCtxs = append(yCtxs, "sent")
			return 1, nil
		})
		ydone <- err
	}()
	time.Sleep(10 * time.Millisecond) // Y waits for the slot
	close(hold)
	<-xdone
	if err := <-ydone; err != nil {
		t.Fatalf("Y: %v", err)
	}
	r.watch.check(t)
	for _, tr := range r.trees(t) {
		if r44Str(tr.call, "resilience.outcome") != "success" {
			continue
		}
		var nums []int64
		for _, a := range tr.attempts {
			nums = append(nums, r44Int(a, "resilience.attempt"))
		}
		t.Logf("Y: sent %d; attempt spans %v; call attempts=%d", len(yCtxs), nums, r44Int(tr.call, "resilience.attempts"))
		if len(nums) != 1 || nums[0] != 1 {
			t.Errorf("Y's one attempt span is numbered %v, want [1]", nums)
		}
	}
}
