package pipeline_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"testing"
	"testing/synctest"
	"time"

	"github.com/resiliencekit/resiliencekit/hedge"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/resilience"
)

// A hedge its operation refuses unsent (class rejected: httpclient's while
// the first attempt reads a streamed body) is no latency of the
// dependency's: the quantile the policy hedges at stays that of the
// answers (first attempts of 10 to 100 ms, their median about 55 ms),
// where counting the refusals' near-zero "latencies" pulled it down, and
// the lower delay sent more hedges to be refused (review124).
func TestReview124RefusedHedgeTeachesNoLatency(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		pol := hedge.New(hedge.Quantile(0.5), hedge.MaxShare(1))
		p := pipeline.New(pipeline.WithHedging(pol))
		r := rand.New(rand.NewPCG(1, 124))
		for range 400 {
			d := time.Duration(10+r.IntN(91)) * time.Millisecond
			_, err := pipeline.Do(context.Background(), p, func(ctx context.Context) (int, error) {
				if p.IsHedge(ctx) {
					return 0, resilience.Rejected(errors.New("the first attempt's body is still read"))
				}
				time.Sleep(d)
				return 1, nil
			})
			if err != nil {
				t.Fatal(err)
			}
		}
		got, ok := pol.After()
		if !ok || got < 45*time.Millisecond {
			t.Errorf("hedging delay %v (%v), want the answers' median, about 55 ms", got, ok)
		}
	})
}
