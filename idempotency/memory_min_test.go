package idempotency_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/resiliencekit/resiliencekit/idempotency"
	"github.com/resiliencekit/resiliencekit/idempotencykey"
)

// The smallest store holds the claim of a request with the longest key in
// the longest scope (hashed: every scope makes a key of one length), and the request runs
// once: its repeat is answered from the store, not run again.
func TestMemoryStoreAtItsMinimumHoldsTheLongestKey(t *testing.T) {
	store := idempotency.NewMemoryStore(idempotency.MinMemoryBytes)
	runs := 0
	scope := func(r *http.Request) string { return r.Header.Get("Authorization") }
	h := idempotency.Middleware(store, idempotency.Scope(scope))(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs++
		w.WriteHeader(http.StatusCreated)
	}))
	key := strings.Repeat("k", idempotencykey.MaxLen)
	for range 2 {
		req := httptest.NewRequest(http.MethodPost, "/orders", strings.NewReader(`{"n":1}`))
		req.Header.Set(idempotency.Header, key)
		req.Header.Set("Authorization", "Bearer "+strings.Repeat("a", 4096)) // a long scope
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		require.Equal(t, http.StatusCreated, rec.Code, rec.Body.String())
	}
	require.Equal(t, 1, runs)
	require.LessOrEqual(t, store.Bytes(), int64(idempotency.MinMemoryBytes))
}
