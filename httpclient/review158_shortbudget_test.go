package httpclient_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/httpclient"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/resilience"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

// A caller whose own budget (60 ms, under 100) is too short for a chain
// whose last hop hangs: the middle hop runs out a moment after it and
// answers 504 with the don't-retry signal. Neither the caller's breaker
// (on B) nor B's (on D) may open: the calls ran out of the caller's time.
// Over HTTP/1.1 and HTTP/2.
func TestReview158_ShortCallerBudgetOpensNoBreaker(t *testing.T) {
	for _, h2 := range []bool{false, true} {
		t.Run(map[bool]string{false: "h1", true: "h2"}[h2], func(t *testing.T) {
			d, dRT := review158Server(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				<-r.Context().Done()
			}), h2)
			bBreaker := breaker.New("D", breaker.ConsecutiveFailures(3))
			bClient := httpclient.New(httpclient.Base(dRT), httpclient.WithPipeline(pipeline.New(
				pipeline.WithBreaker(bBreaker),
				pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(3), retrypolicy.BaseDelay(time.Millisecond))))))
			_ = bClient
			// B: as review158Hop, with its own client.
			b, bRT := review158HopWith(t, d, bClient, h2)
			aBreaker := breaker.New("B", breaker.ConsecutiveFailures(3))
			a := httpclient.New(httpclient.Base(bRT), httpclient.WithPipeline(pipeline.New(
				pipeline.WithBreaker(aBreaker),
				pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(3), retrypolicy.BaseDelay(time.Millisecond))))))
			for i := 0; i < 12; i++ {
				ctx, cancel := context.WithTimeout(context.Background(), 60*time.Millisecond)
				_ = a.GetJSON(ctx, b.URL, nil)
				cancel()
			}
			if s := aBreaker.State(); s != resilience.StateClosed {
				t.Errorf("the caller's breaker on B is %v after calls its own 60 ms budget ended (counts %+v)", s, aBreaker.Counts())
			}
			if s := bBreaker.State(); s != resilience.StateClosed {
				t.Errorf("B's breaker on D is %v after calls its caller's 60 ms budget ended (counts %+v)", s, bBreaker.Counts())
			}
		})
	}
}
