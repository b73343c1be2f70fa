package httpclient_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/resiliencekit/resiliencekit/httpclient"
	"github.com/resiliencekit/resiliencekit/idempotency"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
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
