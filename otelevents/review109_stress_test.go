package otelevents_test

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.uber.org/goleak"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/otelevents"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

// Many goroutines, many dependencies, one Listener and one Tracer: every
// call counted once under its own name, every attempt too, and the call
// spans agree; no goroutine left behind.
func TestReview109StressManyNames(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	l, rd := r109New(t, otelevents.SampleDurations(4))
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	tr := otelevents.NewTracer(tp)
	const names = 300 // past the Tracer's 256 kept
	ps := make([]*pipeline.Pipeline, names)
	for i := range ps {
		name := "d" + strconv.Itoa(i)
		opts := []pipeline.Option{pipeline.WithName(name), pipeline.WithListener(l),
			pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(3), retrypolicy.BaseDelay(time.Microsecond), retrypolicy.MaxDelay(time.Microsecond))),
			pipeline.WithBreaker(breaker.New(name, breaker.ConsecutiveFailures(1<<20)))}
		if i%2 == 0 {
			opts = append(opts, pipeline.WithTracer(tr))
		}
		ps[i] = pipeline.New(opts...)
	}
	var calls, attempts [names]atomic.Int64
	var wg sync.WaitGroup
	fail := errors.New("503")
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 600 {
				k := (g*7919 + i*31) % names
				calls[k].Add(1)
				_, _ = pipeline.Do(context.Background(), ps[k], func(ctx context.Context) (int, error) {
					if attempts[k].Add(1)%3 != 0 {
						return 0, fail
					}
					return 1, nil
				})
			}
		}()
	}
	wg.Wait()
	s := r109Sums(t, rd)
	perCalls := map[string]int64{}
	perAttempts := map[string]int64{}
	for k, v := range s["resilience.calls"] {
		perCalls[k[:indexBar(k)]] += v
	}
	for k, v := range s["resilience.attempts"] {
		perAttempts[k[:indexBar(k)]] += v
	}
	for i := range names {
		name := "d" + strconv.Itoa(i)
		if perCalls[name] != calls[i].Load() || perAttempts[name] != attempts[i].Load() {
			t.Errorf("%s: calls %d want %d, attempts %d want %d", name, perCalls[name], calls[i].Load(), perAttempts[name], attempts[i].Load())
		}
	}
	var callSpans int64
	for _, sp := range rec.Ended() {
		if sp.Parent().IsValid() {
			continue
		}
		callSpans++
	}
	var traced int64
	for i := 0; i < names; i += 2 {
		traced += calls[i].Load()
	}
	if callSpans != traced {
		t.Errorf("%d call spans for %d traced calls", callSpans, traced)
	}
	_ = tp.Shutdown(context.Background())
}

func indexBar(s string) int {
	for i := range s {
		if s[i] == '|' {
			return i
		}
	}
	return len(s)
}
