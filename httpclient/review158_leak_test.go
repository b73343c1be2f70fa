package httpclient_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/resiliencekit/resiliencekit/deadline"
	"github.com/resiliencekit/resiliencekit/hedge"
	"github.com/resiliencekit/resiliencekit/httpclient"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
	"github.com/resiliencekit/resiliencekit/retrysignal"
)

// A caller that hangs up, and one whose budget runs out, in the middle of
// a chain whose last hop hangs (with hedging at the middle hop): nothing
// is left running once the servers are closed.
func TestReview158_NoLeakOnHangUp(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	d := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-time.After(3 * time.Second):
		}
	}))
	dTr := &http.Transport{}
	bc := httpclient.New(httpclient.Base(dTr), httpclient.WithPipeline(pipeline.New(
		pipeline.WithHedging(hedge.New(hedge.Delay(5*time.Millisecond))),
		pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(3), retrypolicy.BaseDelay(time.Millisecond))))))
	b := httptest.NewServer(deadline.Middleware(retrysignal.Middleware(retrysignal.Handler(func(w http.ResponseWriter, r *http.Request) error {
		return bc.GetJSON(r.Context(), d.URL, nil)
	}))))
	bTr := &http.Transport{}
	a := httpclient.New(httpclient.Base(bTr))
	for i := 0; i < 5; i++ {
		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(30*time.Millisecond, cancel)
		if err := a.GetJSON(ctx, b.URL, nil); err == nil {
			t.Fatal("succeeded")
		}
		ctx, cancel = context.WithTimeout(context.Background(), 40*time.Millisecond)
		if err := a.GetJSON(ctx, b.URL, nil); err == nil {
			t.Fatal("succeeded")
		}
		cancel()
	}
	bTr.CloseIdleConnections()
	b.Close()
	dTr.CloseIdleConnections()
	d.Close()
	time.Sleep(50 * time.Millisecond)
}
