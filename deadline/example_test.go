package deadline_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/resiliencekit/resiliencekit/deadline"
)

func ExampleMiddleware() {
	h := deadline.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		d, ok := r.Context().Deadline()
		fmt.Println(ok, time.Until(d).Round(time.Second))
	}))

	// The client side: what is left of the caller's budget goes in the header.
	ctx, cancel := context.WithTimeout(context.Background(), 1200*time.Millisecond)
	defer cancel()
	r := httptest.NewRequest(http.MethodGet, "/stock", nil)
	deadline.Inject(ctx, r.Header)

	h.ServeHTTP(httptest.NewRecorder(), r)
	// Output: true 1s
}
