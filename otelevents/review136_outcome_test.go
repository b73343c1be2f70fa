package otelevents_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/hedge"
	"github.com/resiliencekit/resiliencekit/otelevents"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/resilience"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

// r136Sums returns each counter's values by outcome.
func r136Sums(t *testing.T, rd *sdkmetric.ManualReader) map[string]map[string]int64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := rd.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	out := map[string]map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if s, ok := m.Data.(metricdata.Sum[int64]); ok {
				for _, dp := range s.DataPoints {
					o, _ := dp.Attributes.Value("outcome")
					if out[m.Name] == nil {
						out[m.Name] = map[string]int64{}
					}
					out[m.Name][o.AsString()] += dp.Value
				}
			}
		}
	}
	return out
}

// classless claims the class ClassSuccess (its zero value) for a
// non-nil error: an integration's typed error whose class field was left
// unset.
type classless struct{ class resilience.Class }

func (classless) Error() string                       { return "500 internal error" }
func (e classless) ResilienceClass() resilience.Class { return e.class }

// TestReview136OutcomeNeverSuccessForAnError: resilience.calls'
// outcome is "success" exactly for the calls that returned no error, and
// resilience.attempts lists pending answers as "pending".
func TestReview136OutcomeNeverSuccessForAnError(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rd := sdkmetric.NewManualReader()
		l, err := otelevents.New(sdkmetric.NewMeterProvider(sdkmetric.WithReader(rd)))
		if err != nil {
			t.Fatal(err)
		}
		b := breaker.New("dep", breaker.ConsecutiveFailures(1000), breaker.Window(time.Hour, 6))
		p := pipeline.New(pipeline.WithBreaker(b), pipeline.WithListener(l),
			pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(2), retrypolicy.BaseDelay(10*time.Millisecond), retrypolicy.Jitter(retrypolicy.None))),
			pipeline.WithHedging(hedge.New(hedge.Delay(50*time.Millisecond), hedge.MaxShare(1))))
		var okCalls, errCalls int64
		do := func(ctx context.Context, op resilience.Operation[int]) {
			if _, err := pipeline.Do(ctx, p, op); err == nil {
				okCalls++
			} else {
				errCalls++
			}
		}
		boom := errors.New("503")
		do(t.Context(), func(context.Context) (int, error) { return 1, nil })
		do(t.Context(), func(context.Context) (int, error) { return 0, boom })
		do(t.Context(), func(context.Context) (int, error) { return 0, resilience.Pending(errors.New("409")) })
		do(t.Context(), func(context.Context) (int, error) { return 0, resilience.Permanent(errors.New("400")) })
		do(t.Context(), func(context.Context) (int, error) { return 0, classless{} })
		ctx, cancel := context.WithCancel(t.Context())
		time.AfterFunc(5*time.Millisecond, cancel)
		do(ctx, func(context.Context) (int, error) { return 0, boom }) // hang-up in backoff
		synctest.Wait()
		sums := r136Sums(t, rd)
		t.Logf("calls %v; attempts %v; breaker %+v", sums["resilience.calls"], sums["resilience.attempts"], b.Counts())
		if got := sums["resilience.calls"]["success"]; got != okCalls {
			t.Errorf("resilience.calls{outcome=success} = %d, but %d calls succeeded (%d failed)", got, okCalls, errCalls)
		}
		if sums["resilience.attempts"]["pending"] != 2 || sums["resilience.calls"]["pending"] != 1 {
			t.Errorf("pending not listed: %v", sums)
		}
		if bs := b.Counts().TotalSuccesses; int64(bs) != okCalls+1 { // the 400 is a success for a breaker (documented)
			t.Errorf("the breaker counts %d successes, %d calls succeeded and one had a 400", bs, okCalls)
		}
	})
}
