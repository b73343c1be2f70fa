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
	srv := httptest.NewServer(idempotency.Middleware(idempotency.NewMemoryStore(0))(http.HandlerFunc(
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

	orders := pipeline.New( // one pipeline per dependency
		pipeline.WithRetry(retrypolicy.New(retrypolicy.BaseDelay(time.Millisecond))),
		pipeline.WithTimeBudget(2*time.Second),
	)
	client := httpclient.New(httpclient.WithPipeline(orders))
	var order struct{ ID int }
	// The key makes the POST safe to retry: the server runs it once.
	err := client.PostJSON(context.Background(), srv.URL+"/orders", map[string]string{"sku": "a"}, &order,
		httpclient.IdempotencyKey("order-7f3a"))
	fmt.Println(order.ID, err, calls)

	// A caller error is not retried, and comes back typed.
	err = client.GetJSON(context.Background(), srv.URL+"/missing", nil)
	var se *httpclient.StatusError
	fmt.Println(errors.As(err, &se), se.StatusCode, calls)
	// Output:
	// 17 <nil> 2
	// true 404 2
}
