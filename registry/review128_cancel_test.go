package registry_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/registry"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

// A call whose caller hung up during its retry of a 503: the breaker now
// counts it a failure (review127); the registry's figures, documented as
// counting as the breaker does, must agree.
func TestReview128RegistryAgreesWithBreaker(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := registry.New()
		b := breaker.New("b128")
		p, err := r.AddPipeline(pipeline.New(pipeline.WithName("p128"), pipeline.WithBreaker(b),
			pipeline.WithRetry(retrypolicy.New(retrypolicy.BaseDelay(time.Second), retrypolicy.Jitter(retrypolicy.None)))))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(t.Context())
		time.AfterFunc(1500*time.Millisecond, cancel) // in the retry
		n := 0
		pipeline.Do(ctx, p, func(ctx context.Context) (int, error) {
			if n++; n == 1 {
				return 0, errors.New("503")
			}
			<-ctx.Done()
			return 0, ctx.Err()
		})
		synctest.Wait()
		s := r95State(t, r, p, "p128")
		c := b.Counts()
		t.Logf("registry %+v breaker %+v", s, c)
		if uint64(c.TotalFailures) != s.Failures || uint64(c.TotalSuccesses) != s.Successes {
			t.Fatalf("breaker counted %d failures %d successes; registry %d failures %d successes",
				c.TotalFailures, c.TotalSuccesses, s.Failures, s.Successes)
		}
	})
}
