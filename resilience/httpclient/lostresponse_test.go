package httpclient_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/resiliencekit/resiliencekit/resilience/httpclient"
	"github.com/resiliencekit/resiliencekit/resilience/idempotency"
)

// orderService creates an order per request it runs, behind the
// idempotency middleware, and loses the response of its first drops
// requests: it processes them, then drops the connection before replying.
type orderService struct {
	created  atomic.Int64
	received atomic.Int64
	drops    int64
	handler  http.Handler
}

func newOrderService(drops int64) *orderService {
	s := &orderService{drops: drops}
	s.handler = idempotency.Middleware(idempotency.NewMemoryStore(0))(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := s.created.Add(1)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_, _ = fmt.Fprintf(w, `{"id":%d}`, id)
	}))
	return s
}

func (s *orderService) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if s.received.Add(1) > s.drops {
		s.handler.ServeHTTP(w, r)
		return
	}
	s.handler.ServeHTTP(httptest.NewRecorder(), r) // the order is created...
	conn, _, err := http.NewResponseController(w).Hijack()
	if err == nil {
		conn.Close() // ...and the response is lost
	}
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
	assert.GreaterOrEqual(t, svc.received.Load(), int64(3))
}

func TestLostResponseWithoutKeyIsNotRetried(t *testing.T) {
	svc := newOrderService(1)
	srv := newServer(t, svc)
	err := httpclient.New(fastRetry()).PostJSON(t.Context(), srv.URL+"/orders", map[string]string{"sku": "a"}, nil)
	require.Error(t, err, "the client cannot know whether the order exists")
	assert.EqualValues(t, 1, svc.received.Load(), "so it does not risk a second one")
	assert.EqualValues(t, 1, svc.created.Load())
}
