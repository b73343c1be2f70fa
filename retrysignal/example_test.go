package retrysignal_test

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"

	"github.com/resiliencekit/resiliencekit/retrysignal"
)

// A service whose own outbound call failed, after its client retried,
// tells its caller not to retry: the status keeps its meaning (503), and
// the NoRetryHeader says that retrying is done.
func Example() {
	handler := retrysignal.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		err := errors.New("inventory: retry: gave up after 4 attempts") // what our client returned
		retrysignal.WriteError(w, err)
	}))
	rec := httptest.NewRecorder()
	handler.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/orders/7", nil))
	fmt.Println(rec.Code, "don't retry:", retrysignal.NoRetry(rec.Header()))
	// Output: 503 don't retry: true
}
