package idempotency_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/resiliencekit/resiliencekit/idempotency"
)

// TestTheFingerprintCoversTheRequest: a repeat under the same key that
// differs in any part that makes it another request (its method, path,
// query or body, by a single byte, or by bytes moved from one part to
// another) is refused as a key reused (422); one that differs only in
// what does not (headers, the host it was sent to, the key's quoting, how
// the body was framed) is replayed.
func TestTheFingerprintCoversTheRequest(t *testing.T) {
	type request struct {
		method, target, body string
		header               http.Header
		host                 string
		chunked              bool
	}
	first := request{method: http.MethodPost, target: "/orders/a?sku=1", body: `{"n":1}`}
	for _, tc := range []struct {
		name   string
		change func(r *request)
		same   bool
	}{
		{"the method", func(r *request) { r.method = http.MethodPatch }, false},
		{"the path", func(r *request) { r.target = "/orders/b?sku=1" }, false},
		{"a trailing slash", func(r *request) { r.target = "/orders/a/?sku=1" }, false},
		{"an escaped slash", func(r *request) { r.target = "/orders%2Fa?sku=1" }, false},
		{"the query", func(r *request) { r.target = "/orders/a?sku=2" }, false},
		{"no query", func(r *request) { r.target = "/orders/a" }, false},
		{"the body", func(r *request) { r.body = `{"n":2}` }, false},
		{"a byte more of body", func(r *request) { r.body = `{"n":1} ` }, false},
		{"no body", func(r *request) { r.body = "" }, false},
		{"the query moved into the body", func(r *request) { r.target, r.body = "/orders/a?", "sku=1"+`{"n":1}` }, false},
		{"the path's end moved into the query", func(r *request) { r.target = "/orders/?asku=1" }, false},
		{"the same request", func(*request) {}, true},
		{"other headers", func(r *request) {
			r.header = http.Header{"User-Agent": {"retrier/2"}, "Traceparent": {"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}, "Date": {"Thu, 03 Dec 2026 08:00:00 GMT"}}
		}, true},
		{"another host", func(r *request) { r.host = "replica-2.internal" }, true},
		{"the key quoted", func(r *request) { r.header = http.Header{idempotency.Header: {`"k"`}} }, true},
		{"a chunked body", func(r *request) { r.chunked = true }, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var runs atomic.Int64
			h := idempotency.Middleware(nil, idempotency.SharedKeys())(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				runs.Add(1)
				w.WriteHeader(http.StatusCreated)
			}))
			send := func(rq request) *httptest.ResponseRecorder {
				r := httptest.NewRequest(rq.method, rq.target, strings.NewReader(rq.body))
				r.Header.Set(idempotency.Header, "k")
				for k, vs := range rq.header {
					r.Header[k] = vs
				}
				if rq.host != "" {
					r.Host = rq.host
				}
				if rq.chunked {
					r.ContentLength, r.TransferEncoding = -1, []string{"chunked"}
				}
				w := httptest.NewRecorder()
				h.ServeHTTP(w, r)
				return w
			}
			require.Equal(t, http.StatusCreated, send(first).Code)
			repeat := first
			tc.change(&repeat)
			w := send(repeat)
			if tc.same {
				assert.Equal(t, http.StatusCreated, w.Code)
				assert.Equal(t, "true", w.Header().Get(idempotency.ReplayedHeader), "replayed")
			} else {
				assert.Equal(t, http.StatusUnprocessableEntity, w.Code, "refused as a key reused")
				assert.Contains(t, w.Body.String(), "idempotency key reused")
			}
			assert.EqualValues(t, 1, runs.Load(), "run once")
		})
	}
}
