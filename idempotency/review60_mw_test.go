package idempotency_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/resiliencekit/resiliencekit/deadline"
	"github.com/resiliencekit/resiliencekit/idempotency"
)

type r60slow struct {
	idempotency.Store
	delay atomic.Int64
}

func (s *r60slow) Begin(ctx context.Context, key string, claim idempotency.Record, lease time.Duration) (*idempotency.Record, error) {
	time.Sleep(time.Duration(s.delay.Load()))
	return s.Store.Begin(ctx, key, claim, lease)
}

func TestReview60DeadlineDuringClaim(t *testing.T) {
	st := &r60slow{Store: idempotency.NewMemoryStore(1 << 20)}
	var runs atomic.Int64
	h := deadline.Middleware(idempotency.Middleware(st, idempotency.SharedKeys())(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		if r.Header.Get(deadline.Header) != "" {
			t.Errorf("handler saw the header")
		}
		w.WriteHeader(201)
		io.WriteString(w, "made")
	})))
	srv := httptest.NewServer(h)
	defer srv.Close()
	send := func(budget string) (int, string) {
		req, _ := http.NewRequest("POST", srv.URL, strings.NewReader("x"))
		req.Header.Set("Idempotency-Key", "key-1")
		if budget != "" {
			req.Header.Set(deadline.Header, budget)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp.StatusCode, string(b)
	}
	st.delay.Store(int64(80 * time.Millisecond))
	c1, _ := send("50")
	st.delay.Store(0)
	c2, b2 := send("")
	c3, b3 := send("")
	t.Logf("slow claim: %d; retry: %d %q; again: %d %q; runs %d", c1, c2, b2, c3, b3, runs.Load())
	if c1 != 503 || c2 != 201 || c3 != 201 || runs.Load() != 1 {
		t.Errorf("want 503, 201, 201 replay, 1 run")
	}
}

// A handler that streams and stops as its context's deadline passes: what
// is stored and replayed?
func TestReview60PartialAtDeadline(t *testing.T) {
	st := idempotency.NewMemoryStore(1 << 20)
	var runs atomic.Int64
	h := deadline.Middleware(idempotency.Middleware(st, idempotency.SharedKeys())(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		w.WriteHeader(200)
		for i := 0; i < 100; i++ {
			select {
			case <-r.Context().Done():
				return // cut short
			case <-time.After(5 * time.Millisecond):
			}
			io.WriteString(w, "chunk;")
			w.(http.Flusher).Flush()
		}
	})))
	srv := httptest.NewServer(h)
	defer srv.Close()
	send := func(budget string) (int, int, error) {
		req, _ := http.NewRequest("POST", srv.URL, strings.NewReader("x"))
		req.Header.Set("Idempotency-Key", "key-2")
		if budget != "" {
			req.Header.Set(deadline.Header, budget)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, 0, err
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp.StatusCode, len(b), err
	}
	c1, n1, e1 := send("60")
	c2, n2, e2 := send("")
	t.Logf("first (60 ms budget): %d, %d bytes, %v; retry: %d, %d bytes, %v; runs %d (full is %d bytes)", c1, n1, e1, c2, n2, e2, runs.Load(), 600)
	if c2 == 200 && n2 < 600 {
		t.Errorf("a truncated 200 (%d of 600 bytes) is stored and replayed to every retry for the TTL", n2)
	}
}
