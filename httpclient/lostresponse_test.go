package httpclient_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/resiliencekit/resiliencekit/chaos"
	"github.com/resiliencekit/resiliencekit/httpclient"
	"github.com/resiliencekit/resiliencekit/idempotency"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

// orderService creates an order per request it runs, behind the
// idempotency middleware, and loses the responses of its first drops
// requests: the chaos backend processes them, then resets the connection
// before replying.
type orderService struct {
	*chaos.Backend
	created atomic.Int64
}

func newOrderService(drops int64) *orderService {
	s := &orderService{}
	orders := idempotency.Middleware(nil, idempotency.SharedKeys())(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := s.created.Add(1)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_, _ = fmt.Fprintf(w, `{"id":%d}`, id)
	}))
	var handled atomic.Int64
	s.Backend = chaos.New(0, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		orders.ServeHTTP(w, r)
		if handled.Add(1) == drops {
			s.SetDropResponse(false)
		}
	}))
	s.SetDropResponse(drops > 0)
	return s
}

func TestLostResponsesWithKeyCreateOneOrder(t *testing.T) {
	svc := newOrderService(2)
	srv := newServer(t, svc)
	var order struct{ ID int }
	err := httpclient.New(fastRetry()).PostJSON(t.Context(), srv.URL+"/orders", map[string]string{"sku": "a"}, &order,
		httpclient.IdempotencyKey("order-7f3a"))
	require.NoError(t, err)
	assert.Equal(t, 1, order.ID, "the original response")
	assert.EqualValues(t, 1, svc.created.Load(), "exactly one order")
	assert.GreaterOrEqual(t, svc.Received(), int64(3))
}

func TestLostResponseWithoutKeyIsNotRetried(t *testing.T) {
	svc := newOrderService(1)
	srv := newServer(t, svc)
	err := httpclient.New(fastRetry()).PostJSON(t.Context(), srv.URL+"/orders", map[string]string{"sku": "a"}, nil)
	require.Error(t, err, "the client cannot know whether the order exists")
	assert.EqualValues(t, 1, svc.Received(), "so it does not risk a second one")
	assert.EqualValues(t, 1, svc.created.Load())
}

// TestARetryWhileTheFirstRunsGetsItsAnswer: an attempt timeout shorter
// than a handler that does not stop for its caller makes the client retry
// while the first attempt still runs on the server; the retries get 409
// with Retry-After (the key's request in progress), wait it, and then get
// the first run's answer, replayed. The handler runs once.
func TestARetryWhileTheFirstRunsGetsItsAnswer(t *testing.T) {
	var runs atomic.Int64
	srv := httptest.NewServer(idempotency.Middleware(nil, idempotency.SharedKeys())(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := runs.Add(1)
		time.Sleep(300 * time.Millisecond) // a write that goes on when its caller has gone
		w.WriteHeader(http.StatusCreated)
		_, _ = fmt.Fprintf(w, `{"id":%d}`, n)
	})))
	defer srv.Close()
	client := httpclient.New(httpclient.WithPipeline(pipeline.New(pipeline.WithTimeBudget(5*time.Second),
		pipeline.WithRetry(retrypolicy.New(retrypolicy.BaseDelay(time.Millisecond))),
		pipeline.WithAttemptTimeout(100*time.Millisecond))))
	var order struct{ ID int }
	require.NoError(t, client.PostJSON(t.Context(), srv.URL, map[string]string{"sku": "a"}, &order,
		httpclient.IdempotencyKey("order-8")))
	assert.Equal(t, 1, order.ID, "the first run's answer")
	assert.EqualValues(t, 1, runs.Load(), "the handler ran once")

	// A 409 without a key, or without a Retry-After, is the caller's.
	conflict := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		if r.URL.Query().Has("after") {
			w.Header().Set("Retry-After", "1")
		}
		w.WriteHeader(http.StatusConflict)
	}))
	defer conflict.Close()
	for _, tc := range []struct {
		url  string
		opts []httpclient.CallOption
	}{
		{url: conflict.URL + "?after", opts: nil},
		{url: conflict.URL, opts: []httpclient.CallOption{httpclient.IdempotencyKey("order-9")}},
	} {
		runs.Store(0)
		err := client.PostJSON(t.Context(), tc.url, map[string]string{"sku": "a"}, nil, tc.opts...)
		require.Error(t, err)
		assert.EqualValues(t, 1, runs.Load(), "%s: not retried", tc.url)
	}
}
