package httpclient_test

import (
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/resiliencekit/resiliencekit/chaos"
	"github.com/resiliencekit/resiliencekit/httpclient"
	"github.com/resiliencekit/resiliencekit/idempotency"
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
	orders := idempotency.Middleware(nil)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
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
