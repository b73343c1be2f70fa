package idempotency_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/resiliencekit/resiliencekit/idempotency"
)

func ExampleMiddleware() {
	orders := 0
	create := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		orders++
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"order":%d}`, orders)
	})
	h := idempotency.Middleware(idempotency.NewMemoryStore(0), idempotency.SharedKeys(), idempotency.Required())(create)

	post := func(key, body string) {
		r := httptest.NewRequest(http.MethodPost, "/orders", strings.NewReader(body))
		if key != "" {
			r.Header.Set(idempotency.Header, key)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		b, _ := io.ReadAll(w.Body)
		fmt.Println(w.Code, w.Header().Get(idempotency.ReplayedHeader), strings.TrimSpace(string(b)))
	}
	post("k1", `{"sku":"a"}`) // runs
	post("k1", `{"sku":"a"}`) // a retry: replayed
	post("k1", `{"sku":"b"}`) // the key reused for another request
	post("", `{"sku":"a"}`)   // no key on a route that requires one
	fmt.Println("orders created:", orders)
	// Output:
	// 201  {"order":1}
	// 201 true {"order":1}
	// 422  {"status":422,"title":"idempotency key reused","detail":"this key was used for a different request"}
	// 400  {"status":400,"title":"missing idempotency key","detail":"this request requires an Idempotency-Key header"}
	// orders created: 1
}

// The transport-neutral core, as a server of any protocol uses it: the
// first request with a key runs, a repeat gets its result.
func ExampleGuard() {
	guard := idempotency.NewGuard(idempotency.NewMemoryStore(0))
	ctx := context.Background()
	charge := func(key, fingerprint string) {
		claim, stored, err := guard.Begin(ctx, "caller-1", key, fingerprint)
		switch {
		case err != nil:
			fmt.Println("refused:", err)
		case stored != nil:
			fmt.Println("replayed:", stored.Status, string(stored.Body))
		default:
			defer claim.Release(ctx) // if the work panics
			// The work runs under claim.Context().
			fmt.Println("ran")
			_ = claim.Complete(ctx, idempotency.Record{Status: 201, Body: []byte("charge 1")})
		}
	}
	charge("k1", "sha256-of-the-request")
	charge("k1", "sha256-of-the-request")
	charge("k1", "sha256-of-another-request")
	// Output:
	// ran
	// replayed: 201 charge 1
	// refused: idempotency key reused for a different request
}
