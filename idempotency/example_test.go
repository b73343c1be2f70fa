package idempotency_test

import (
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
	h := idempotency.Middleware(idempotency.NewMemoryStore(0), idempotency.Required())(create)

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
