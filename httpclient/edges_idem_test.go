package httpclient

import (
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/resiliencekit/resiliencekit/hedge"
	"github.com/resiliencekit/resiliencekit/idempotencykey"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

// keyServer keeps idempotency keys, as Stripe's API does: it answers a
// request whose key's first request is still running with 409 Conflict,
// here without Retry-After. A hedge is exactly such a request. The first
// request of a key fails with 503 if failFirst is set.
type keyServer struct {
	mu        sync.Mutex
	inFlight  map[string]bool
	failFirst bool
	n         int
}

func (s *keyServer) RoundTrip(r *http.Request) (*http.Response, error) {
	key := r.Header.Get(idempotencykey.Header)
	s.mu.Lock()
	busy := s.inFlight[key]
	if !busy {
		s.inFlight[key] = true
	}
	s.mu.Unlock()
	if busy {
		return &http.Response{StatusCode: http.StatusConflict, Status: "409 Conflict", Header: http.Header{},
			Body: io.NopCloser(strings.NewReader(`{"error":"idempotency_key_in_use"}`)), Request: r}, nil
	}
	defer func() { s.mu.Lock(); delete(s.inFlight, key); s.mu.Unlock() }()
	select {
	case <-time.After(50 * time.Millisecond):
	case <-r.Context().Done():
		return nil, r.Context().Err()
	}
	s.mu.Lock()
	s.n++
	fail := s.failFirst && s.n == 1
	s.mu.Unlock()
	if fail {
		return &http.Response{StatusCode: http.StatusServiceUnavailable, Status: "503", Header: http.Header{}, Body: http.NoBody, Request: r}, nil
	}
	return &http.Response{StatusCode: 200, Status: "200 OK", Header: http.Header{}, Body: io.NopCloser(strings.NewReader("charged")), Request: r}, nil
}

// TestHedgeOfAKeyedRequestIsNotTheAnswer: a hedge's 409 to its own key is
// its twin's doing: it neither cuts the first attempt short (which
// succeeds) nor ends the call when the first fails (which is retried).
func TestHedgeOfAKeyedRequestIsNotTheAnswer(t *testing.T) {
	for _, failFirst := range []bool{false, true} {
		p := pipeline.New(pipeline.WithRetry(retrypolicy.New(retrypolicy.BaseDelay(time.Millisecond))),
			pipeline.WithHedging(hedge.New(hedge.Delay(10*time.Millisecond), hedge.MaxShare(1))))
		c := New(WithPipeline(p), Base(&keyServer{inFlight: map[string]bool{}, failFirst: failFirst}))
		err := c.PostJSON(t.Context(), "http://payments.invalid/charges", map[string]int{"amount": 100}, nil, IdempotencyKey("order-42"))
		if err != nil {
			t.Errorf("first attempt failing: %v: the charge failed: %v", failFirst, err)
		}
	}
}
