// Command httpclient shows the resilient HTTP client against local servers:
// retries of safe requests, idempotency keys for POSTs, a lost response
// that does not create a second order, a caller error that is not
// retried, a deadline that travels from service to service, and a breaker
// that fails fast when a service is down.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"time"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/chaos"
	"github.com/resiliencekit/resiliencekit/deadline"
	"github.com/resiliencekit/resiliencekit/httpclient"
	"github.com/resiliencekit/resiliencekit/idempotency"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/resilience"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

func main() {
	ctx := context.Background()
	retry := retrypolicy.New(retrypolicy.BaseDelay(20 * time.Millisecond))
	retries := resilience.ListenerFunc(func(e resilience.Event) {
		if e.Kind == resilience.EventRetry {
			fmt.Printf("    attempt %d: %v; retry in %v\n", e.Attempt, e.Err, e.Delay.Round(time.Millisecond))
		}
	})
	client := httpclient.New(httpclient.WithPipeline(pipeline.New(pipeline.WithRetry(retry),
		pipeline.WithTimeBudget(2*time.Second), pipeline.WithListener(retries))))

	fmt.Println("1. A service answers 503 twice, then 200")
	for _, method := range []string{"GET", "POST without key", "POST with key"} {
		var calls atomic.Int64
		var keys []string
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if k := r.Header.Get(idempotency.Header); k != "" {
				keys = append(keys, k)
			}
			if calls.Add(1) <= 2 {
				http.Error(w, "overloaded", http.StatusServiceUnavailable)
				return
			}
			_, _ = io.WriteString(w, `{"ok":true}`)
		}))
		var err error
		switch method {
		case "GET":
			err = client.GetJSON(ctx, srv.URL, nil)
		case "POST without key":
			err = client.PostJSON(ctx, srv.URL, map[string]int{"qty": 1}, nil)
		default:
			err = client.PostJSON(ctx, srv.URL, map[string]int{"qty": 1}, nil, httpclient.IdempotencyKey("order-42"))
		}
		fmt.Printf("  %s: %d calls, keys sent %q, error: %v\n", method, calls.Load(), keys, err)
		srv.Close()
	}

	fmt.Println("2. The order service creates the order, then loses the response, twice")
	var created, handled atomic.Int64
	orders := idempotency.Middleware(nil, idempotency.SharedKeys())(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := created.Add(1)
		w.WriteHeader(http.StatusCreated)
		_, _ = fmt.Fprintf(w, `{"id":%d}`, id)
	}))
	var lossy *chaos.Backend
	lossy = chaos.New(0, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		orders.ServeHTTP(w, r)
		if handled.Add(1) == 2 {
			lossy.SetDropResponse(false)
		}
	}))
	lossy.SetDropResponse(true) // process each request, then reset the connection
	srv := httptest.NewServer(lossy)
	var order struct{ ID int }
	err := client.PostJSON(ctx, srv.URL, map[string]string{"sku": "a"}, &order, httpclient.IdempotencyKey("order-7f3a"))
	fmt.Printf("  got order %d after %d requests; orders created: %d; error: %v\n", order.ID, lossy.Received(), created.Load(), err)
	srv.Close()

	fmt.Println("3. A bad request is not retried")
	srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusBadRequest)
		_, _ = io.WriteString(w, `{"error":"qty must be positive"}`)
	}))
	err = client.PostJSON(ctx, srv.URL, map[string]int{"qty": -1}, nil, httpclient.IdempotencyKey("order-43"))
	var se *httpclient.StatusError
	if errors.As(err, &se) {
		fmt.Printf("  status %d, body %s\n", se.StatusCode, se.Body)
	}
	srv.Close()

	fmt.Println("4. The budget travels: client (2 s) -> A (spends 100 ms) -> B")
	b := httptest.NewServer(deadline.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		d, _ := r.Context().Deadline()
		fmt.Printf("  B has %v left\n", time.Until(d).Round(10*time.Millisecond))
		_, _ = io.WriteString(w, `{}`)
	})))
	a := httptest.NewServer(deadline.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(100 * time.Millisecond)
		_ = httpclient.New().GetJSON(r.Context(), b.URL, nil)
		_, _ = io.WriteString(w, `{}`)
	})))
	_ = client.GetJSON(ctx, a.URL, nil)
	a.Close()
	b.Close()

	fmt.Println("5. A dead service opens the breaker; later calls fail fast")
	dead := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "down", http.StatusServiceUnavailable)
	}))
	br := breaker.New("inventory", breaker.ConsecutiveFailures(2))
	guarded := httpclient.New(httpclient.WithPipeline(pipeline.New(
		pipeline.WithBreaker(br), pipeline.WithRetry(retrypolicy.New(retrypolicy.BaseDelay(5*time.Millisecond))))))
	for i := 1; i <= 4; i++ {
		start := time.Now()
		err := guarded.GetJSON(ctx, dead.URL, nil)
		fmt.Printf("  call %d: open=%v after %v\n", i, errors.Is(err, breaker.ErrOpen), time.Since(start).Round(time.Millisecond))
	}
	dead.Close()
}
