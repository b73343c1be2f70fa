package idempotency_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/resiliencekit/resiliencekit/idempotency"
)

type spyStore struct {
	*idempotency.MemoryStore
	mu    sync.Mutex
	saved []idempotency.Record
}

func (s *spyStore) Complete(ctx context.Context, key string, claim, rec idempotency.Record, ttl time.Duration) error {
	s.mu.Lock()
	s.saved = append(s.saved, rec)
	s.mu.Unlock()
	return s.MemoryStore.Complete(ctx, key, claim, rec, ttl)
}

// Catches the excluded headers (Set-Cookie, by default) being stored: a
// session cookie must not be written to the store, even if replay drops it.
func TestExcludedHeadersAreNotStored(t *testing.T) {
	store := &spyStore{MemoryStore: idempotency.NewMemoryStore(1 << 20)}
	h := idempotency.Middleware(store, idempotency.SharedKeys())(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.SetCookie(w, &http.Cookie{Name: "session", Value: "secret"})
		w.Header().Set("X-Kept", "yes")
		w.WriteHeader(http.StatusCreated)
	}))
	req := httptest.NewRequest(http.MethodPost, "/", strings.NewReader("{}"))
	req.Header.Set("Idempotency-Key", "k1")
	h.ServeHTTP(httptest.NewRecorder(), req)
	store.mu.Lock()
	defer store.mu.Unlock()
	if len(store.saved) != 1 {
		t.Fatalf("%d records saved, want 1", len(store.saved))
	}
	if got := store.saved[0].Header.Get("X-Kept"); got != "yes" {
		t.Fatalf("X-Kept stored as %q", got)
	}
	if v, ok := store.saved[0].Header["Set-Cookie"]; ok {
		t.Fatalf("Set-Cookie stored: %v", v)
	}
}

// Catches dropping `len(values) > 1`: two Idempotency-Key headers are refused.
func TestTwoKeysAreRefused(t *testing.T) {
	called := false
	h := idempotency.Middleware(idempotency.NewMemoryStore(1<<20), idempotency.SharedKeys())(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		called = true
	}))
	req := httptest.NewRequest(http.MethodPost, "/", strings.NewReader("{}"))
	req.Header.Add("Idempotency-Key", "k1")
	req.Header.Add("Idempotency-Key", "k2")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusBadRequest || called {
		t.Fatalf("status %d, handler called %v: want 400, not called", rec.Code, called)
	}
}
