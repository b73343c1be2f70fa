package otelevents_test

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/hedge"
	"github.com/resiliencekit/resiliencekit/limit"
	"github.com/resiliencekit/resiliencekit/otelevents"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/resilience"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

type r109Want struct {
	outcome  string           // of the call, metric and span
	attempts int64            // resilience.attempts metric total
	spans    int              // attempt spans (and the call span's resilience.attempts)
	retries  int64            // resilience.retries
	giveups  map[string]int64 // reason -> count
	rejected int64            // resilience.rejections
}

type r109Scenario struct {
	name string
	opts []pipeline.Option
	prep func(p *pipeline.Pipeline) // before the call, e.g. open the breaker
	call func(p *pipeline.Pipeline, ran *atomic.Int64) error
	want r109Want
}

func r109Attr(kv []attribute.KeyValue, k string) (attribute.Value, bool) {
	for _, a := range kv {
		if string(a.Key) == k {
			return a.Value, true
		}
	}
	return attribute.Value{}, false
}

func TestReview109Scenarios(t *testing.T) {
	transient := errors.New("503")
	failN := func(n int64) func(p *pipeline.Pipeline, ran *atomic.Int64) error {
		return func(p *pipeline.Pipeline, ran *atomic.Int64) error {
			_, err := pipeline.Do(context.Background(), p, func(ctx context.Context) (int, error) {
				if ran.Add(1) <= n {
					return 0, transient
				}
				return 1, nil
			})
			return err
		}
	}
	retry := func(max int) pipeline.Option {
		return pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(max), retrypolicy.BaseDelay(10*time.Millisecond), retrypolicy.MaxDelay(10*time.Millisecond)))
	}
	scenarios := []r109Scenario{
		{name: "success", opts: []pipeline.Option{retry(3)}, call: failN(0),
			want: r109Want{outcome: "success", attempts: 1, spans: 1}},
		{name: "retried-success", opts: []pipeline.Option{retry(3)}, call: failN(2),
			want: r109Want{outcome: "success", attempts: 3, spans: 3, retries: 2}},
		{name: "retries-exhausted", opts: []pipeline.Option{retry(3)}, call: failN(99),
			want: r109Want{outcome: "transient", attempts: 3, spans: 3, retries: 2, giveups: map[string]int64{"retries_exhausted": 1}}},
		{name: "quota-exhausted", opts: []pipeline.Option{pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(3), retrypolicy.BaseDelay(10*time.Millisecond), retrypolicy.WithQuota(retrypolicy.NewQuota(0, 0, 0))))}, call: failN(99),
			want: r109Want{outcome: "transient", attempts: 1, spans: 1, giveups: map[string]int64{"quota_exhausted": 1}}},
		{name: "budget-exceeded", opts: []pipeline.Option{pipeline.WithTimeBudget(25 * time.Millisecond), pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(5), retrypolicy.BaseDelay(20*time.Millisecond), retrypolicy.MaxDelay(20*time.Millisecond), retrypolicy.Jitter(retrypolicy.None)))},
			call: func(p *pipeline.Pipeline, ran *atomic.Int64) error {
				_, err := pipeline.Do(context.Background(), p, func(ctx context.Context) (int, error) {
					ran.Add(1)
					time.Sleep(10 * time.Millisecond)
					return 0, transient
				})
				return err
			},
			want: r109Want{outcome: "transient", attempts: 1, spans: 1, giveups: map[string]int64{"time_budget_exceeded": 1}}},
		{name: "not-retried", opts: []pipeline.Option{retry(3)},
			call: func(p *pipeline.Pipeline, ran *atomic.Int64) error {
				_, err := pipeline.Do(context.Background(), p, func(ctx context.Context) (int, error) { ran.Add(1); return 0, transient }, pipeline.SingleAttempt())
				return err
			},
			want: r109Want{outcome: "transient", attempts: 1, spans: 1, giveups: map[string]int64{"not_retried": 1}}},
		{name: "breaker-rejects", opts: []pipeline.Option{retry(3), pipeline.WithBreaker(breaker.New("dep", breaker.ConsecutiveFailures(1), breaker.OpenTimeout(time.Hour)))},
			prep: func(p *pipeline.Pipeline) {
				_, _ = pipeline.Do(context.Background(), p, func(ctx context.Context) (int, error) { return 0, transient }, pipeline.SingleAttempt())
			},
			call: failN(0),
			want: r109Want{outcome: "terminal", attempts: 0, spans: 0, rejected: 1}},
		{name: "caller-cancels-mid-backoff", opts: []pipeline.Option{pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(3), retrypolicy.BaseDelay(time.Second), retrypolicy.MaxDelay(time.Second), retrypolicy.Jitter(retrypolicy.None)))},
			call: func(p *pipeline.Pipeline, ran *atomic.Int64) error {
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				go func() { time.Sleep(500 * time.Millisecond); cancel() }()
				_, err := pipeline.Do(ctx, p, func(ctx context.Context) (int, error) { ran.Add(1); return 0, transient })
				return err
			},
			want: r109Want{outcome: "canceled", attempts: 1, spans: 1, retries: 1}},
		{name: "limit-refuses", opts: []pipeline.Option{retry(3), pipeline.WithLimit(r109Held(t))}, call: failN(0),
			want: r109Want{outcome: "rejected", attempts: 1, spans: 0}}, // refused before it was sent: counted, rejected (package doc); no span
		{name: "half-open-probe-refused", opts: []pipeline.Option{retry(3), pipeline.WithBreaker(r109HalfOpenBusy(t))}, call: failN(0),
			want: r109Want{outcome: "terminal", attempts: 0, spans: 0, rejected: 1}},
		{name: "hedge-wins", opts: []pipeline.Option{retry(3), pipeline.WithHedging(hedge.New(hedge.Delay(10*time.Millisecond), hedge.MaxShare(1)))},
			call: func(p *pipeline.Pipeline, ran *atomic.Int64) error {
				_, err := pipeline.Do(context.Background(), p, func(ctx context.Context) (int, error) {
					if ran.Add(1) == 1 {
						<-ctx.Done()
						return 0, ctx.Err()
					}
					return 1, nil
				})
				return err
			},
			want: r109Want{outcome: "success", attempts: 1, spans: 2}},
		{name: "hedge-loses", opts: []pipeline.Option{retry(3), pipeline.WithHedging(hedge.New(hedge.Delay(10*time.Millisecond), hedge.MaxShare(1)))},
			call: func(p *pipeline.Pipeline, ran *atomic.Int64) error {
				_, err := pipeline.Do(context.Background(), p, func(ctx context.Context) (int, error) {
					if ran.Add(1) == 1 {
						time.Sleep(15 * time.Millisecond)
						return 1, nil
					}
					<-ctx.Done()
					return 0, ctx.Err()
				})
				return err
			},
			want: r109Want{outcome: "success", attempts: 1, spans: 2}},
	}
	for _, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				l, rd := r109New(t)
				rec := tracetest.NewSpanRecorder()
				tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
				opts := append([]pipeline.Option{pipeline.WithName("dep"), pipeline.WithListener(l), pipeline.WithTracer(otelevents.NewTracer(tp))}, sc.opts...)
				p := pipeline.New(opts...)
				base := map[string]map[string]int64{}
				if sc.prep != nil {
					sc.prep(p)
					base = r109Sums(t, rd)
				}
				nspans := len(rec.Ended())
				var ran atomic.Int64
				err := sc.call(p, &ran)
				synctest.Wait()
				s := r109Sums(t, rd)
				for m, mm := range base {
					for k, v := range mm {
						if m != "resilience.breaker.state" {
							s[m][k] -= v
						}
					}
				}
				ended := rec.Ended()[nspans:]
				var callSpans, attemptSpans []sdktrace.ReadOnlySpan
				for _, sp := range ended {
					if strings.HasSuffix(sp.Name(), " attempt") {
						attemptSpans = append(attemptSpans, sp)
					} else {
						callSpans = append(callSpans, sp)
					}
				}
				var desc []string
				for _, sp := range ended {
					o, _ := r109Attr(sp.Attributes(), "resilience.outcome")
					n, _ := r109Attr(sp.Attributes(), "resilience.attempts")
					a, _ := r109Attr(sp.Attributes(), "resilience.attempt")
					h, _ := r109Attr(sp.Attributes(), "resilience.hedge")
					d, _ := r109Attr(sp.Attributes(), "resilience.delay_ms")
					desc = append(desc, fmt.Sprintf("[%s outcome=%s attempts=%s attempt=%s hedge=%s delay=%s status=%v]", sp.Name(), o.Emit(), n.Emit(), a.Emit(), h.Emit(), d.Emit(), sp.Status().Code))
				}
				sort.Strings(desc)
				t.Logf("ran %d err %v\nmetrics %s\nspans %s", ran.Load(), err, r109Fmt(s), strings.Join(desc, " "))
				w := sc.want
				if got := r109Total(s["resilience.calls"]); got != 1 {
					t.Errorf("resilience.calls = %d, want 1", got)
				}
				if w.outcome != "" && s["resilience.calls"]["dep|"+w.outcome] != 1 {
					t.Errorf("call outcome: %v, want %s", s["resilience.calls"], w.outcome)
				}
				if got := r109Total(s["resilience.attempts"]); got != w.attempts {
					t.Errorf("resilience.attempts = %d, want %d", got, w.attempts)
				}
				if got := r109Total(s["resilience.retries"]); got != w.retries {
					t.Errorf("resilience.retries = %d, want %d", got, w.retries)
				}
				if got := r109Total(s["resilience.rejections"]); got != w.rejected {
					t.Errorf("resilience.rejections = %d, want %d", got, w.rejected)
				}
				for k, v := range s["resilience.giveups"] {
					if v != w.giveups[strings.TrimPrefix(k, "dep|")] {
						t.Errorf("giveups %s = %d, want %v", k, v, w.giveups)
					}
				}
				for k, v := range w.giveups {
					if s["resilience.giveups"]["dep|"+k] != v {
						t.Errorf("giveups %s = %d, want %d", k, s["resilience.giveups"]["dep|"+k], v)
					}
				}
				if len(callSpans) != 1 {
					t.Fatalf("%d call spans", len(callSpans))
				}
				if len(attemptSpans) != w.spans {
					t.Errorf("%d attempt spans, want %d", len(attemptSpans), w.spans)
				}
				n, _ := r109Attr(callSpans[0].Attributes(), "resilience.attempts")
				if n.AsInt64() != int64(len(attemptSpans)) {
					t.Errorf("call span resilience.attempts = %d, attempt spans %d", n.AsInt64(), len(attemptSpans))
				}
				o, _ := r109Attr(callSpans[0].Attributes(), "resilience.outcome")
				var mo string
				for k, v := range s["resilience.calls"] {
					if v == 1 {
						mo = strings.TrimPrefix(k, "dep|")
					}
				}
				if o.AsString() != mo {
					t.Errorf("call span outcome %q, metric outcome %q", o.AsString(), mo)
				}
				if c := resilience.Classify(err).String(); c != mo {
					t.Errorf("metric outcome %q, Classify(err) %q", mo, c)
				}
			})
		})
	}
}

// r109Held is a limit of one slot, held by a call of its own until t ends.
func r109Held(t *testing.T) *limit.Limiter {
	lim := limit.NewFixed(1)
	in, stop, out := make(chan struct{}), make(chan struct{}), make(chan struct{})
	p := pipeline.New(pipeline.WithLimit(lim))
	go func() {
		defer close(out)
		_, _ = pipeline.Do(context.Background(), p, func(ctx context.Context) (int, error) {
			close(in)
			<-stop
			return 1, nil
		})
	}()
	<-in
	t.Cleanup(func() { close(stop); <-out })
	return lim
}

// r109HalfOpenBusy is a half-open breaker whose one probe is out until t
// ends.
func r109HalfOpenBusy(t *testing.T) *breaker.Breaker {
	b := breaker.New("dep", breaker.ConsecutiveFailures(1), breaker.OpenTimeout(10*time.Millisecond), breaker.HalfOpenRequests(1))
	_ = b.Execute(context.Background(), func(context.Context) error { return errors.New("x") })
	time.Sleep(20 * time.Millisecond)
	in, stop, out := make(chan struct{}), make(chan struct{}), make(chan struct{})
	go func() {
		defer close(out)
		_ = b.Execute(context.Background(), func(context.Context) error { close(in); <-stop; return nil })
	}()
	<-in
	t.Cleanup(func() { close(stop); <-out })
	return b
}
