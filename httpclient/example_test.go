package httpclient_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"time"

	"github.com/resiliencekit/resiliencekit/httpclient"
	"github.com/resiliencekit/resiliencekit/idempotency"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
	"github.com/resiliencekit/resiliencekit/retrysignal"
)

func ExampleClient_PostJSON() {
	// An order service that is overloaded for its first request.
	calls := 0
	srv := httptest.NewServer(idempotency.Middleware(idempotency.NewMemoryStore(0), idempotency.SharedKeys())(http.HandlerFunc(
		func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path != "/orders" {
				http.NotFound(w, r)
				return
			}
			if calls++; calls == 1 {
				http.Error(w, "overloaded", http.StatusServiceUnavailable)
				return
			}
			w.WriteHeader(http.StatusCreated)
			_, _ = io.WriteString(w, `{"id":17}`)
		})))
	defer srv.Close()

	ctx := context.Background()
	ordersURL := srv.URL + "/orders"
	newOrder := struct{ Key, SKU string }{Key: "order-7f3a", SKU: "a"}

	orders := pipeline.New( // one pipeline per dependency
		pipeline.WithTimeBudget(2*time.Second),
		pipeline.WithRetry(retrypolicy.New(retrypolicy.BaseDelay(time.Millisecond))),
	)
	client := httpclient.New(httpclient.WithPipeline(orders)) // or &http.Client{Transport: httpclient.NewTransport(...)}
	var created struct{ ID int }
	err := client.PostJSON(ctx, ordersURL, newOrder, &created,
		httpclient.IdempotencyKey(newOrder.Key)) // a POST is retried only with a key: the server runs it once
	fmt.Println(created.ID, err, calls)

	// A caller error is not retried, and comes back typed.
	err = client.GetJSON(context.Background(), srv.URL+"/missing", nil)
	var se *httpclient.StatusError
	fmt.Println(errors.As(err, &se), se.StatusCode, calls)
	// Output:
	// 17 <nil> 2
	// true 404 2
}

// A reverse proxy over the Transport: when the dependency answers, the
// proxy passes on the Transport's "don't retry" signal; when it does not
// (here, it refuses connections), retrysignal.ProxyErrorHandler answers
// with the signal, so that the proxy's callers do not retry what its
// Transport retried.
func ExampleNewTransport_reverseProxy() {
	down := httptest.NewServer(http.NotFoundHandler())
	target, _ := url.Parse(down.URL)
	down.Close() // refuses connections from now on

	proxy := httputil.NewSingleHostReverseProxy(target)
	proxy.Transport = httpclient.NewTransport(httpclient.WithPipeline(pipeline.New(
		pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(3), retrypolicy.BaseDelay(time.Millisecond))))))
	proxy.ErrorHandler = retrysignal.ProxyErrorHandler

	w := httptest.NewRecorder()
	proxy.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/orders/17", nil))
	fmt.Println(w.Code, w.Header().Get(retrysignal.NoRetryHeader))
	// Output: 503 1
}
