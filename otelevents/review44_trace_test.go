package otelevents_test

import (
	"context"
	"errors"
	"math"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/hedge"
	"github.com/resiliencekit/resiliencekit/otelevents"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/resilience"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

// The tree of the package doc: three attempts, the second with a
// retry-after hint larger than its backoff; delay_ms, retry_after_ms,
// statuses, exception events, the op spans under their attempts.
func TestReview44_RetryTree(t *testing.T) {
	r := newR44Rig()
	p := pipeline.New(pipeline.WithName("payments"), pipeline.WithTracer(r.tracer),
		pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(3), retrypolicy.BaseDelay(20*time.Millisecond), retrypolicy.Jitter(retrypolicy.None))))
	n := 0
	var ends []time.Time
	var starts []time.Time
	res, err := pipeline.Do(context.Background(), p, func(ctx context.Context) (int, error) {
		starts = append(starts, time.Now())
		defer func() { ends = append(ends, time.Now()) }()
		r.opSpan(ctx)
		n++
		switch n {
		case 1:
			return 0, errors.New("503")
		case 2:
			return 0, resilience.RetryAfter(errors.New("503 again"), 80*time.Millisecond)
		}
		return 7, nil
	})
	if res != 7 || err != nil {
		t.Fatalf("got %v, %v", res, err)
	}
	r.watch.check(t)
	tr := r.one(t)
	if got := len(tr.attempts); got != 3 {
		t.Fatalf("%d attempt spans", got)
	}
	if len(tr.ops) != 3 {
		t.Errorf("%d op spans under attempts, want 3", len(tr.ops))
	}
	c := tr.call
	if c.Name() != "resilience payments" || c.SpanKind() != trace.SpanKindInternal || r44Int(c, "resilience.attempts") != 3 ||
		r44Str(c, "resilience.outcome") != "success" || statusOf(c) != codes.Unset || r44Str(c, "resilience.dependency") != "payments" || r44Exceptions(c) != 0 {
		t.Errorf("call span: %s %v %v status %v", c.Name(), c.SpanKind(), c.Attributes(), c.Status())
	}
	for i, a := range tr.attempts {
		if a.Name() != "resilience payments attempt" || a.SpanKind() != trace.SpanKindInternal || r44Int(a, "resilience.attempt") != int64(i+1) ||
			r44Str(a, "resilience.breaker.state") != "closed" || r44Str(a, "resilience.dependency") != "payments" {
			t.Errorf("attempt %d: %s %v", i+1, a.Name(), a.Attributes())
		}
		if _, ok := r44Attr(a, "resilience.hedge"); ok {
			t.Errorf("attempt %d marked hedge", i+1)
		}
		wantOutcome, wantStatus, wantEx := "transient", codes.Error, 1
		if i == 2 {
			wantOutcome, wantStatus, wantEx = "success", codes.Unset, 0
		}
		if r44Str(a, "resilience.outcome") != wantOutcome || statusOf(a) != wantStatus || r44Exceptions(a) != wantEx {
			t.Errorf("attempt %d: outcome %s status %v exceptions %d", i+1, r44Str(a, "resilience.outcome"), a.Status(), r44Exceptions(a))
		}
		d, _ := r44Float(a, "resilience.delay_ms")
		if i == 0 {
			if d != 0 {
				t.Errorf("first attempt delay_ms %v", d)
			}
			continue
		}
		gap := float64(starts[i].Sub(ends[i-1])) / 1e6
		if d > gap+0.5 || d < gap-5 {
			t.Errorf("attempt %d: delay_ms %.2f, measured gap %.2f", i+1, d, gap)
		}
		// span timeline: the gap between the spans is the delay
		spanGap := float64(a.StartTime().Sub(tr.attempts[i-1].EndTime())) / 1e6
		if math.Abs(spanGap-d) > 5 {
			t.Errorf("attempt %d: delay_ms %.2f but the gap on the timeline is %.2f", i+1, d, spanGap)
		}
	}
	if _, ok := r44Attr(tr.attempts[1], "resilience.retry_after_ms"); ok {
		t.Error("attempt 2 has retry_after_ms though attempt 1 gave no hint")
	}
	if ra, ok := r44Float(tr.attempts[2], "resilience.retry_after_ms"); !ok || ra != 80 {
		t.Errorf("attempt 3 retry_after_ms %v %v, want 80", ra, ok)
	}
	if d, _ := r44Float(tr.attempts[2], "resilience.delay_ms"); d < 80 {
		t.Errorf("attempt 3 delay_ms %v below its floor 80", d)
	}
	for _, o := range tr.ops {
		if o.EndTime().After(c.EndTime()) {
			t.Error("op span ends after call")
		}
	}
}

// A retry-after hint larger than MaxDelay: reported as the retry used it.
func TestReview44_RetryAfterCapped(t *testing.T) {
	r := newR44Rig()
	p := pipeline.New(pipeline.WithName("x"), pipeline.WithTracer(r.tracer),
		pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(2), retrypolicy.BaseDelay(time.Millisecond), retrypolicy.MaxDelay(30*time.Millisecond))))
	n := 0
	_, err := pipeline.Do(context.Background(), p, func(ctx context.Context) (int, error) {
		n++
		if n == 1 {
			return 0, resilience.RetryAfter(errors.New("429"), time.Hour)
		}
		return 1, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	tr := r.one(t)
	if len(tr.attempts) != 2 {
		t.Fatalf("%d attempts", len(tr.attempts))
	}
	ra, ok := r44Float(tr.attempts[1], "resilience.retry_after_ms")
	d, _ := r44Float(tr.attempts[1], "resilience.delay_ms")
	if !ok || ra != 30 || d < 29 || d > 200 {
		t.Errorf("retry_after_ms %v (%v), delay_ms %v; want 30 and about 30", ra, ok, d)
	}
}

// A call the breaker rejects: a call span, no attempt spans, attempts 0,
// terminal, Error, one exception event.
func TestReview44_BreakerRejects(t *testing.T) {
	r := newR44Rig()
	b := breaker.New("pay", breaker.ConsecutiveFailures(1), breaker.OpenTimeout(time.Hour))
	p := pipeline.New(pipeline.WithBreaker(b), pipeline.WithTracer(r.tracer))
	_, _ = pipeline.Do(context.Background(), p, func(context.Context) (int, error) { return 0, errors.New("down") })
	if b.State() != resilience.StateOpen {
		t.Fatal("breaker not open")
	}
	r.rec.Reset()
	called := false
	_, err := pipeline.Do(context.Background(), p, func(context.Context) (int, error) { called = true; return 1, nil })
	if !breaker.IsRejection(err) || called {
		t.Fatalf("err %v called %v", err, called)
	}
	tr := r.one(t)
	c := tr.call
	if len(tr.attempts) != 0 || r44Int(c, "resilience.attempts") != 0 || r44Str(c, "resilience.outcome") != "terminal" ||
		statusOf(c) != codes.Error || r44Exceptions(c) != 1 || c.Name() != "resilience pay" {
		t.Errorf("rejected call: %s %v %v attempts %d exceptions %d", c.Name(), c.Attributes(), c.Status(), len(tr.attempts), r44Exceptions(c))
	}
}

// Permanent and canceled leave the status Unset, with an exception event;
// rejected (a full limit) sets Error.
func TestReview44_StatusByClass(t *testing.T) {
	cases := []struct {
		name    string
		err     func(cancel func()) error
		outcome string
		status  codes.Code
	}{
		{"permanent", func(func()) error { return resilience.Permanent(errors.New("400")) }, "permanent", codes.Unset},
		{"terminal", func(func()) error { return resilience.Terminal(errors.New("gone")) }, "terminal", codes.Error},
		{"rejected", func(func()) error { return resilience.Rejected(errors.New("shed")) }, "rejected", codes.Error},
		{"canceled", func(cancel func()) error { cancel(); return context.Canceled }, "canceled", codes.Unset},
		{"deadline", func(func()) error { return context.DeadlineExceeded }, "transient", codes.Error},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := newR44Rig()
			p := pipeline.New(pipeline.WithName("s"), pipeline.WithTracer(r.tracer),
				pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(1))))
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			_, err := pipeline.Do(ctx, p, func(context.Context) (int, error) { return 0, c.err(cancel) })
			if err == nil {
				t.Fatal("no error")
			}
			tr := r.one(t)
			for _, s := range append([]sdktrace.ReadOnlySpan{tr.call}, tr.attempts...) {
				if r44Str(s, "resilience.outcome") != c.outcome || statusOf(s) != c.status || r44Exceptions(s) != 1 {
					t.Errorf("%s: outcome %s status %v exceptions %d; want %s %v 1", s.Name(), r44Str(s, "resilience.outcome"), s.Status(), r44Exceptions(s), c.outcome, c.status)
				}
			}
		})
	}
}

// A caller's context done before the call: the Listener counts the call
// (outcome canceled); the Tracer records no span (the package doc).
func TestReview44_CanceledBeforeCall(t *testing.T) {
	r := newR44Rig()
	l, mr := r44Listener(t)
	p := pipeline.New(pipeline.WithName("s"), pipeline.WithTracer(r.tracer), pipeline.WithListener(l), pipeline.WithRetry(retrypolicy.New()))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := pipeline.Do(ctx, p, func(context.Context) (int, error) { return 1, nil })
	sums, _, _ := r44Collect(t, mr)
	t.Logf("err %v; %d spans; metrics calls %v", err, len(r.rec.Ended()), sums["resilience.calls"])
	r.watch.waitEnded(t, time.Second)
	if got := len(r.rec.Ended()); got != 0 || r44Total(sums["resilience.calls"]) != 1 {
		t.Errorf("%d call spans, %d calls counted: want none, and one", got, r44Total(sums["resilience.calls"]))
	}
}

// A call whose span is not recording starts no attempt span at all; the
// operation still sees the call's span context (sampled out).
func TestReview44_SampledOut(t *testing.T) {
	for _, name := range []string{"never", "parent-unsampled"} {
		t.Run(name, func(t *testing.T) {
			sampler := sdktrace.NeverSample()
			if name != "never" {
				sampler = sdktrace.ParentBased(sdktrace.AlwaysSample())
			}
			r := newR44Rig(sdktrace.WithSampler(sampler))
			ct := &r44CountingTP{TracerProvider: r.tp}
			tracer := newTracerFrom(ct)
			p := pipeline.New(pipeline.WithName("s"), pipeline.WithTracer(tracer),
				pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(3), retrypolicy.BaseDelay(0))),
				pipeline.WithHedging(hedge.New(hedge.Delay(time.Millisecond), hedge.MaxShare(1))))
			ctx := context.Background()
			if name != "never" {
				ctx = trace.ContextWithRemoteSpanContext(ctx, trace.NewSpanContext(trace.SpanContextConfig{
					TraceID: trace.TraceID{1}, SpanID: trace.SpanID{2}, Remote: true}))
			}
			var seen []trace.SpanContext
			var mu sync.Mutex
			n := 0
			_, err := pipeline.Do(ctx, p, func(ctx context.Context) (int, error) {
				mu.Lock()
				seen = append(seen, trace.SpanContextFromContext(ctx))
				n++
				k := n
				mu.Unlock()
				if k < 3 {
					time.Sleep(5 * time.Millisecond)
					return 0, errors.New("x")
				}
				return 1, nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if got := ct.starts(); got != 1 {
				t.Errorf("%d spans started for a sampled-out call, want 1 (the call's)", got)
			}
			if len(r.rec.Ended()) != 0 {
				t.Errorf("%d spans recorded", len(r.rec.Ended()))
			}
			for _, sc := range seen {
				if !sc.IsValid() || sc.IsSampled() {
					t.Errorf("op saw span context %v (valid %v sampled %v)", sc, sc.IsValid(), sc.IsSampled())
				}
				if name != "never" && sc.TraceID() != (trace.TraceID{1}) {
					t.Errorf("op's trace id %v, want the parent's", sc.TraceID())
				}
			}
		})
	}
}

// A hedge that wins: both attempts under the call, the hedge marked, delay
// 0, the first canceled (Unset) and ended before the call's span.
func TestReview44_HedgeWins(t *testing.T) {
	r := newR44Rig()
	p := pipeline.New(pipeline.WithName("h"), pipeline.WithTracer(r.tracer),
		pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(2))),
		pipeline.WithHedging(hedge.New(hedge.Delay(10*time.Millisecond), hedge.MaxShare(1))))
	var mu sync.Mutex
	n := 0
	res, err := pipeline.Do(context.Background(), p, func(ctx context.Context) (int, error) {
		r.opSpan(ctx)
		mu.Lock()
		n++
		k := n
		mu.Unlock()
		if k == 1 {
			select {
			case <-ctx.Done():
				return 0, ctx.Err()
			case <-time.After(2 * time.Second):
				return 1, nil
			}
		}
		return 2, nil
	})
	if res != 2 || err != nil {
		t.Fatalf("%v %v", res, err)
	}
	r.watch.waitEnded(t, time.Second)
	r.watch.check(t)
	tr := r.one(t)
	if len(tr.attempts) != 2 || len(tr.ops) != 2 {
		t.Fatalf("%d attempts %d ops", len(tr.attempts), len(tr.ops))
	}
	first, h := tr.attempts[0], tr.attempts[1]
	if _, ok := r44Attr(first, "resilience.hedge"); ok {
		t.Error("first attempt marked hedge")
	}
	if v, ok := r44Attr(h, "resilience.hedge"); !ok || !v.AsBool() {
		t.Error("hedge not marked")
	}
	if d, _ := r44Float(h, "resilience.delay_ms"); d != 0 {
		t.Errorf("hedge delay_ms %v", d)
	}
	if r44Str(first, "resilience.outcome") != "canceled" || statusOf(first) != codes.Unset {
		t.Errorf("loser: %s %v", r44Str(first, "resilience.outcome"), first.Status())
	}
	if r44Str(h, "resilience.outcome") != "success" || r44Int(tr.call, "resilience.attempts") != 2 || r44Str(tr.call, "resilience.outcome") != "success" {
		t.Errorf("winner %s; call %v", r44Str(h, "resilience.outcome"), tr.call.Attributes())
	}
	// Twins overlap on the timeline
	if !h.StartTime().Before(first.EndTime()) {
		t.Error("twins do not overlap")
	}
}

// The first attempt wins while its hedge still runs: the loser's span ends
// (after the call returned), canceled, Unset; its parent is the call.
func TestReview44_HedgeLoses(t *testing.T) {
	r := newR44Rig()
	p := pipeline.New(pipeline.WithName("h"), pipeline.WithTracer(r.tracer),
		pipeline.WithHedging(hedge.New(hedge.Delay(5*time.Millisecond), hedge.MaxShare(1), hedge.MaxExtra(3))))
	var mu sync.Mutex
	n := 0
	res, err := pipeline.Do(context.Background(), p, func(ctx context.Context) (int, error) {
		mu.Lock()
		n++
		k := n
		mu.Unlock()
		if k == 1 {
			time.Sleep(40 * time.Millisecond)
			return 1, nil
		}
		<-ctx.Done()
		time.Sleep(20 * time.Millisecond) // a loser that takes a while to notice
		return 0, ctx.Err()
	})
	if res != 1 || err != nil {
		t.Fatalf("%v %v", res, err)
	}
	r.watch.waitEnded(t, 2*time.Second)
	r.watch.check(t)
	tr := r.one(t)
	if len(tr.attempts) < 2 {
		t.Fatalf("%d attempts", len(tr.attempts))
	}
	if int(r44Int(tr.call, "resilience.attempts")) != len(tr.attempts) {
		t.Errorf("call attempts %d", r44Int(tr.call, "resilience.attempts"))
	}
	for _, a := range tr.attempts[1:] {
		if r44Str(a, "resilience.outcome") != "canceled" || statusOf(a) != codes.Unset {
			t.Errorf("loser #%d: %s %v", r44Int(a, "resilience.attempt"), r44Str(a, "resilience.outcome"), a.Status())
		}
		if a.Parent().SpanID() != tr.call.SpanContext().SpanID() {
			t.Error("hedge parent not the call")
		}
	}
}

// Many hedged, retried calls at once with random latencies and outcomes,
// under -race: no span starts under an ended call span, every span ends,
// each attempt's parent is its call, numbers are distinct, the call's
// attempt count is its attempt spans.
func TestReview44_HedgeStress(t *testing.T) {
	r := newR44Rig()
	p := pipeline.New(pipeline.WithName("st"), pipeline.WithTracer(r.tracer),
		pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(3), retrypolicy.BaseDelay(time.Millisecond))),
		pipeline.WithTimeBudget(200*time.Millisecond),
		pipeline.WithHedging(hedge.New(hedge.Delay(500*time.Microsecond), hedge.MaxShare(1), hedge.MaxExtra(3))))
	var wg sync.WaitGroup
	var ran atomic.Int64
	for g := range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 40 {
				ctx, cancel := context.WithTimeout(context.Background(), time.Duration(1+(g+i)%7)*time.Millisecond)
				var once sync.Once
				_, _ = pipeline.Do(ctx, p, func(ctx context.Context) (int, error) {
					once.Do(func() { ran.Add(1) })
					r.opSpan(ctx)
					d := time.Duration((g*31+i*17)%2000) * time.Microsecond
					select {
					case <-time.After(d):
					case <-ctx.Done():
						return 0, ctx.Err()
					}
					switch (g + i) % 4 {
					case 0:
						return 0, errors.New("503")
					case 1:
						return 0, resilience.RetryAfter(errors.New("429"), time.Millisecond)
					}
					return 1, nil
				})
				cancel()
			}
		}()
	}
	wg.Wait()
	r.watch.waitEnded(t, 3*time.Second)
	r.watch.check(t)
	trees := r.trees(t)
	if int64(len(trees)) < ran.Load() {
		t.Errorf("%d call spans, for %d calls whose operation ran", len(trees), ran.Load())
	}
	hedges := 0
	for _, tr := range trees {
		if int(r44Int(tr.call, "resilience.attempts")) != len(tr.attempts) {
			t.Errorf("call says %d attempts, has %d spans", r44Int(tr.call, "resilience.attempts"), len(tr.attempts))
		}
		seen := map[int64]bool{}
		for _, a := range tr.attempts {
			k := r44Int(a, "resilience.attempt")
			if seen[k] {
				t.Errorf("attempt number %d twice", k)
			}
			seen[k] = true
			if a.StartTime().After(tr.call.EndTime()) {
				t.Error("attempt starts after its call ended")
			}
			if v, ok := r44Attr(a, "resilience.hedge"); ok && v.AsBool() {
				hedges++
				if d, _ := r44Float(a, "resilience.delay_ms"); d != 0 {
					t.Errorf("hedge with delay_ms %v", d)
				}
			}
		}
	}
	t.Logf("%d calls, %d hedges", len(trees), hedges)
}

// A panic in the operation: both spans end, with an Error status; the
// panic goes on to the caller. runtime.Goexit: the same.
func TestReview44_PanicAndGoexit(t *testing.T) {
	for _, how := range []string{"panic", "goexit", "hedge-panic"} {
		t.Run(how, func(t *testing.T) {
			r := newR44Rig()
			opts := []pipeline.Option{pipeline.WithName("pg"), pipeline.WithTracer(r.tracer),
				pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(3), retrypolicy.BaseDelay(0)))}
			if how == "hedge-panic" {
				opts = append(opts, pipeline.WithHedging(hedge.New(hedge.Delay(time.Millisecond), hedge.MaxShare(1))))
			}
			p := pipeline.New(opts...)
			done := make(chan any)
			go func() {
				defer func() { done <- recover() }()
				n := 0
				var mu sync.Mutex
				_, _ = pipeline.Do(context.Background(), p, func(ctx context.Context) (int, error) {
					r.opSpan(ctx)
					mu.Lock()
					n++
					k := n
					mu.Unlock()
					switch how {
					case "panic":
						panic("boom")
					case "goexit":
						runtime.Goexit()
					}
					if k == 1 {
						<-ctx.Done()
						return 0, ctx.Err()
					}
					panic("hedge boom")
				})
			}()
			got := <-done
			t.Logf("recovered %v", got)
			if how != "goexit" && got == nil {
				t.Error("the panic did not go on")
			}
			r.watch.waitEnded(t, time.Second)
			r.watch.check(t)
			tr := r.one(t)
			if statusOf(tr.call) != codes.Error || r44Str(tr.call, "resilience.outcome") != "transient" {
				t.Errorf("call: %v %s", tr.call.Status(), r44Str(tr.call, "resilience.outcome"))
			}
			for _, a := range tr.attempts {
				t.Logf("attempt #%d %s %v", r44Int(a, "resilience.attempt"), r44Str(a, "resilience.outcome"), a.Status())
			}
			if len(tr.attempts) == 0 || int(r44Int(tr.call, "resilience.attempts")) != len(tr.attempts) {
				t.Errorf("%d attempt spans, call says %d", len(tr.attempts), r44Int(tr.call, "resilience.attempts"))
			}
		})
	}
}

// WaitWhenOpen: a call waits for the breaker; its spans.
func TestReview44_WaitWhenOpen(t *testing.T) {
	r := newR44Rig()
	b := breaker.New("w", breaker.ConsecutiveFailures(1), breaker.OpenTimeout(30*time.Millisecond))
	p := pipeline.New(pipeline.WithBreaker(b), pipeline.WithTracer(r.tracer), pipeline.WaitWhenOpen(),
		pipeline.WithTimeBudget(2*time.Second),
		pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(3), retrypolicy.BaseDelay(time.Millisecond))))
	_, _ = pipeline.Do(context.Background(), p, func(context.Context) (int, error) { return 0, resilience.Terminal(errors.New("down")) })
	if b.State() != resilience.StateOpen {
		t.Fatal("not open")
	}
	r.rec.Reset()
	start := time.Now()
	res, err := pipeline.Do(context.Background(), p, func(ctx context.Context) (int, error) { r.opSpan(ctx); return 3, nil })
	if res != 3 || err != nil {
		t.Fatalf("%v %v", res, err)
	}
	t.Logf("waited %v", time.Since(start))
	r.watch.check(t)
	tr := r.one(t)
	for _, a := range tr.attempts {
		d, _ := r44Float(a, "resilience.delay_ms")
		t.Logf("attempt #%d state %s delay %.1f outcome %s", r44Int(a, "resilience.attempt"), r44Str(a, "resilience.breaker.state"), d, r44Str(a, "resilience.outcome"))
	}
	if len(tr.attempts) != 1 || r44Int(tr.attempts[0], "resilience.attempt") != 1 || r44Int(tr.call, "resilience.attempts") != 1 {
		t.Errorf("%d attempts, call says %d", len(tr.attempts), r44Int(tr.call, "resilience.attempts"))
	}
	if s := r44Str(tr.attempts[0], "resilience.breaker.state"); s != "half-open" {
		t.Errorf("probe's breaker.state %s", s)
	}
}

// A hedged group fails twice, one failure with a retry-after hint: the
// retry waits for the longest hint (the race returns that failure); the
// next attempt's span should say so in retry_after_ms.
func TestReview44_HedgedRetryAfter(t *testing.T) {
	for _, hintFirst := range []bool{true, false} {
		t.Run(map[bool]string{true: "first-has-hint", false: "hedge-has-hint"}[hintFirst], func(t *testing.T) {
			r := newR44Rig()
			p := pipeline.New(pipeline.WithName("hr"), pipeline.WithTracer(r.tracer),
				pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(2), retrypolicy.BaseDelay(time.Millisecond), retrypolicy.Jitter(retrypolicy.None))),
				pipeline.WithHedging(hedge.New(hedge.Delay(5*time.Millisecond), hedge.MaxShare(1))))
			var n atomic.Int64
			_, err := pipeline.Do(context.Background(), p, func(ctx context.Context) (int, error) {
				switch n.Add(1) {
				case 1: // the first attempt
					if hintFirst {
						time.Sleep(10 * time.Millisecond)
						return 0, resilience.RetryAfter(errors.New("429"), 100*time.Millisecond)
					}
					time.Sleep(30 * time.Millisecond)
					return 0, errors.New("503")
				case 2: // the hedge
					if hintFirst {
						time.Sleep(25 * time.Millisecond)
						return 0, errors.New("503")
					}
					return 0, resilience.RetryAfter(errors.New("429"), 100*time.Millisecond)
				}
				return 1, nil
			})
			if err != nil {
				t.Fatal(err)
			}
			tr := r.one(t)
			if len(tr.attempts) != 3 {
				t.Fatalf("%d attempts", len(tr.attempts))
			}
			third := tr.attempts[2]
			d, _ := r44Float(third, "resilience.delay_ms")
			ra, ok := r44Float(third, "resilience.retry_after_ms")
			t.Logf("retry: delay_ms %.1f retry_after_ms %v (%v)", d, ra, ok)
			if d >= 60 && !ok {
				t.Errorf("the retry waited %.1f ms for a 100 ms hint, but its span has no retry_after_ms", d)
			}
		})
	}
}

// An error whose class is past ClassRejected: the Listener counts it as
// transient; the Tracer?
func TestReview44_TracerUnknownClass(t *testing.T) {
	r := newR44Rig()
	ctx, c := r.tracer.StartCall(context.Background(), "u")
	_, end := c.StartAttempt(ctx, resilience.AttemptInfo{Number: 1})
	end(&r44ClassErr{c: 42})
	c.End(&r44ClassErr{c: 42})
	tr := r.one(t)
	for _, s := range append([]sdktrace.ReadOnlySpan{tr.call}, tr.attempts...) {
		if o := r44Str(s, "resilience.outcome"); o != "transient" || statusOf(s) != codes.Error {
			t.Errorf("%s: outcome %q status %v; the Listener counts it as transient", s.Name(), o, s.Status())
		}
	}
}

// A nil and a zero Tracer record nothing and do not panic; nil options.
func TestReview44_NilTracer(t *testing.T) {
	for _, tr := range []resilience.Tracer{(*otelevents.Tracer)(nil), &otelevents.Tracer{}, otelevents.NewTracer(nil, nil)} {
		p := pipeline.New(pipeline.WithTracer(tr), pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(2), retrypolicy.BaseDelay(0))))
		n := 0
		res, err := pipeline.Do(context.Background(), p, func(context.Context) (int, error) {
			n++
			if n == 1 {
				return 0, errors.New("x")
			}
			return 5, nil
		})
		if res != 5 || err != nil {
			t.Errorf("%T: %v %v", tr, res, err)
		}
	}
}
