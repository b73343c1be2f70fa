package idempotency_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/resiliencekit/resiliencekit/idempotency"
)

// A HEAD covered by the middleware (Methods with HEAD) whose handler
// writes the body as for GET and lets net/http compute Content-Length, as
// most handlers (http.ServeContent aside) do. net/http sends the first
// answer with "Content-Length: <size of what the handler wrote>"; the
// replay, since the body of a HEAD is no longer kept, has none: a client
// that HEADs to learn a resource's size (a download manager, a resumable
// upload's offset check) saw it vanish on a retry. The middleware keeps
// the length net/http computed (4096 bytes: none, the first answer had
// none either).
func TestReview20AHeadsReplayKeepsItsContentLength(t *testing.T) {
	for _, size := range []int{100, 1500, 2048, 2049, 4096} {
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			doc := strings.Repeat("a", size)
			h := idempotency.Middleware(nil, idempotency.SharedKeys(), idempotency.Methods(http.MethodPost, http.MethodHead))(
				http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					w.Header().Set("Content-Type", "text/plain")
					_, _ = w.Write([]byte(doc)) // net/http drops it for a HEAD, but counts it
				}))
			srv := httptest.NewServer(h)
			defer srv.Close()
			head := func() *http.Response {
				req, _ := http.NewRequest(http.MethodHead, srv.URL+"/doc", nil)
				req.Header.Set(idempotency.Header, "k-1")
				resp, err := srv.Client().Do(req)
				require.NoError(t, err)
				resp.Body.Close()
				return resp
			}
			first, replay := head(), head()
			t.Logf("first:  %s Content-Length %q %v", first.Status, first.Header.Get("Content-Length"), first.ContentLength)
			t.Logf("replay: %s Content-Length %q %v (%s: %q)", replay.Status, replay.Header.Get("Content-Length"), replay.ContentLength,
				idempotency.ReplayedHeader, replay.Header.Get(idempotency.ReplayedHeader))
			require.Equal(t, "true", replay.Header.Get(idempotency.ReplayedHeader))
			require.Equal(t, first.Header.Get("Content-Length"), replay.Header.Get("Content-Length"),
				"the replay of a HEAD must carry the Content-Length the first answer had")
		})
	}
}
