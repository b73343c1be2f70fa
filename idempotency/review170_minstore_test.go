package idempotency_test

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/resiliencekit/resiliencekit/idempotency"
	"github.com/resiliencekit/resiliencekit/idempotencykey"
)

// review170: a store of MinMemoryBytes must admit any request the
// middleware accepts: the longest key (plain or quoted), any scope, one
// after another, whatever the earlier responses stored (big headers,
// bodies truncated).
func TestReview170MinStoreAdmitsLongestKeys(t *testing.T) {
	store := idempotency.NewMemoryStore(idempotency.MinMemoryBytes)
	var runs int
	h := idempotency.Middleware(store, idempotency.Scope(func(r *http.Request) string {
		return strings.Repeat("s", 10000) + r.Header.Get("X-Who")
	}))(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs++
		for i := range 20 {
			w.Header().Set("X-Big-"+strconv.Itoa(i), strings.Repeat("v", 200))
		}
		w.WriteHeader(http.StatusCreated)
		w.Write([]byte(strings.Repeat("b", 3000)))
	}))
	keys := []string{
		strings.Repeat("k", idempotencykey.MaxLen),
		`"` + strings.Repeat(`\"`, idempotencykey.MaxLen) + `"`,
		strings.Repeat("~", idempotencykey.MaxLen-1) + "1",
		`"` + strings.Repeat("q", idempotencykey.MaxLen) + `"`,
	}
	for i, k := range keys {
		if _, err := idempotencykey.Parse(k); err != nil {
			t.Fatalf("key %d: %v", i, err)
		}
		for rep := range 2 {
			req := httptest.NewRequest(http.MethodPost, "/orders/"+strings.Repeat("p", 4000)+"?q="+strings.Repeat("x", 4000), strings.NewReader(strings.Repeat("B", 5000)))
			req.Header.Set(idempotencykey.Header, k)
			req.Header.Set("X-Who", strconv.Itoa(i))
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			// A repeat of a response too large to keep is 500 "not
			// replayable", as documented; a refusal (503) is the attack.
			if rec.Code == http.StatusServiceUnavailable || rep == 0 && rec.Code != http.StatusCreated {
				t.Fatalf("key %d rep %d: %d %s (store used %d of %d)", i, rep, rec.Code, rec.Body.String(), store.Bytes(), idempotency.MinMemoryBytes)
			}
		}
	}
	if store.Bytes() > idempotency.MinMemoryBytes {
		t.Fatalf("store counts %d > its bound", store.Bytes())
	}
	if runs != len(keys) {
		t.Errorf("handler ran %d times for %d keys sent twice each", runs, len(keys))
	}
}
