package otelevents_test

import (
	"context"
	"errors"
	"math"
	"sort"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/resiliencekit/resiliencekit/otelevents"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/resilience"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

// delay_ms is the gap slept, retry_after_ms the hint as the retry used it
// (capped by MaxDelay), absent without one.
func TestReview109RetryAfterAttrs(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := tracetest.NewSpanRecorder()
		tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
		p := pipeline.New(pipeline.WithName("dep"), pipeline.WithTracer(otelevents.NewTracer(tp)),
			pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(4), retrypolicy.BaseDelay(10*time.Millisecond),
				retrypolicy.MaxDelay(100*time.Millisecond), retrypolicy.Jitter(retrypolicy.None))))
		var n atomic.Int64
		fail := errors.New("503")
		_, err := pipeline.Do(context.Background(), p, func(ctx context.Context) (int, error) {
			time.Sleep(time.Millisecond)
			switch n.Add(1) {
			case 1:
				return 0, resilience.RetryAfter(fail, 500*time.Millisecond) // capped: 100 ms
			case 2:
				return 0, resilience.RetryAfter(fail, 5*time.Millisecond) // below the backoff (20 ms)
			case 3:
				return 0, fail // backoff 40 ms, no hint
			}
			return 1, nil
		})
		if err != nil {
			t.Fatal(err)
		}
		type at struct {
			n         int64
			delay, ra float64
			hasRA     bool
		}
		var got []at
		for _, sp := range rec.Ended() {
			a, ok := r109Attr(sp.Attributes(), "resilience.attempt")
			if !ok {
				continue
			}
			d, _ := r109Attr(sp.Attributes(), "resilience.delay_ms")
			ra, has := r109Attr(sp.Attributes(), "resilience.retry_after_ms")
			got = append(got, at{a.AsInt64(), d.AsFloat64(), ra.AsFloat64(), has})
		}
		sort.Slice(got, func(i, j int) bool { return got[i].n < got[j].n })
		t.Logf("%+v", got)
		want := []at{{1, 0, 0, false}, {2, 100, 100, true}, {3, 20, 5, true}, {4, 40, 0, false}}
		if len(got) != len(want) {
			t.Fatalf("%d attempt spans", len(got))
		}
		for i := range want {
			g, w := got[i], want[i]
			if math.Abs(g.delay-w.delay) > 0.5 || g.hasRA != w.hasRA || math.Abs(g.ra-w.ra) > 0.001 {
				t.Errorf("attempt %d: delay %v retry_after %v (%v), want %v %v (%v)", w.n, g.delay, g.ra, g.hasRA, w.delay, w.ra, w.hasRA)
			}
		}
	})
}
