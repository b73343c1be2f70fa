package httpclient_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/resiliencekit/resiliencekit/httpclient"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
	"github.com/resiliencekit/resiliencekit/retrysignal"
)

// C answers 429 (or 503) with a Retry-After longer than the time left:
// the retry is not made. The hop answers 504, as its Status documents: its
// caller, with more time, may retry, where a 429 without its Retry-After
// (WriteError drops it) could tell it not to (review26's 409).
func TestReview94_StatusOfAnAnswerWhoseRetryDidNotFit(t *testing.T) {
	for _, st := range []int{429, 503} {
		c := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Retry-After", "5")
			w.WriteHeader(st)
		}))
		cl := httpclient.New(httpclient.WithPipeline(pipeline.New(pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(3))))))
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := review94Get(ctx, cl, c.URL)
		cancel()
		c.Close()
		t.Logf("C %d: Status %d, Retried %v, err %v", st, retrysignal.Status(err), retrysignal.Retried(err), err)
		if got := retrysignal.Status(err); got != http.StatusGatewayTimeout {
			t.Errorf("C answered %d with a Retry-After past the budget; the hop answers %d, want 504", st, got)
		}
	}
}
