package idempotency_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/resiliencekit/resiliencekit/idempotency"
)

// stealStore loses every claim at its first renewal (another replica took
// the key): Renew and Begin then answer with another's claim.
type stealStore struct {
	mem    *idempotency.MemoryStore
	stolen atomic.Bool
}

func (s *stealStore) Begin(ctx context.Context, key string, claim idempotency.Record, lease time.Duration) (*idempotency.Record, error) {
	if s.stolen.Load() {
		return &idempotency.Record{Fingerprint: claim.Fingerprint, Token: "other"}, nil
	}
	return s.mem.Begin(ctx, key, claim, lease)
}
func (s *stealStore) Renew(ctx context.Context, key string, claim idempotency.Record, lease time.Duration) error {
	if s.stolen.Load() {
		return idempotency.ErrNotOwner
	}
	return s.mem.Renew(ctx, key, claim, lease)
}
func (s *stealStore) Complete(ctx context.Context, key string, claim, rec idempotency.Record, ttl time.Duration) error {
	if s.stolen.Load() {
		return idempotency.ErrNotOwner
	}
	return s.mem.Complete(ctx, key, claim, rec, ttl)
}
func (s *stealStore) Release(ctx context.Context, key string, claim idempotency.Record) error {
	if s.stolen.Load() {
		return idempotency.ErrNotOwner
	}
	return s.mem.Release(ctx, key, claim)
}

// TestReview115_NoGoroutineOutlivesItsRequest: panics, Goexit, a lost
// lease with a handler that writes after it, WithLeaseDeadline taken and
// never canceled, a streamed (flushed) answer: once each request has
// returned, and a lease passed, no goroutine of the guard is left (the
// bubble ends with none blocked).
func TestReview115_NoGoroutineOutlivesItsRequest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := &stealStore{mem: idempotency.NewMemoryStore(0)}
		mw := idempotency.Middleware(st, idempotency.SharedKeys(), idempotency.Lease(3*time.Second), idempotency.StoreTimeout(100*time.Millisecond),
			idempotency.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
		var afterLoss atomic.Int64
		h := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			c := idempotency.FromContext(r.Context())
			_, _ = c.WithLeaseDeadline(r.Context()) // never canceled
			switch r.URL.Path {
			case "/panic":
				w.WriteHeader(201)
				panic("boom")
			case "/panic0":
				panic("boom")
			case "/goexit":
				runtime.Goexit()
			case "/stream":
				for range 3 {
					w.Write([]byte("part\n"))
					w.(http.Flusher).Flush()
					time.Sleep(time.Second)
				}
			case "/lost":
				st.stolen.Store(true)
				<-r.Context().Done()
				w.WriteHeader(201)
				w.Write([]byte("after the loss"))
				afterLoss.Add(1)
			}
		}))
		for _, p := range []string{"/panic", "/panic0", "/goexit", "/stream", "/lost"} {
			done := make(chan struct{})
			go func() {
				defer close(done)
				defer func() { recover() }()
				req := httptest.NewRequest(http.MethodPost, p, strings.NewReader("{}"))
				req.Header.Set(idempotency.Header, "k"+strings.TrimPrefix(p, "/"))
				h.ServeHTTP(httptest.NewRecorder(), req)
			}()
			<-done
		}
		if afterLoss.Load() != 1 {
			t.Errorf("the lost lease's handler did not end")
		}
		time.Sleep(10 * time.Second)
		synctest.Wait()
	})
}
