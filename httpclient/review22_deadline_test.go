package httpclient_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/resiliencekit/resiliencekit/deadline"
	"github.com/resiliencekit/resiliencekit/httpclient"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

// A caller's budget header, under keys of every case, several values,
// with and without a deadline, on every attempt (retries included): what
// reaches the server is the attempt's own budget, or none.
func TestReview22StaleBudgetHeaderOfAnyCase(t *testing.T) {
	var mu sync.Mutex
	var seen [][]string
	n := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		var raw []string
		for k, v := range r.Header {
			if len(k) == len(deadline.Header) && http.CanonicalHeaderKey(k) == deadline.Header {
				raw = append(raw, v...)
			}
		}
		seen = append(seen, raw)
		n++
		first := n%2 == 1
		mu.Unlock()
		if first {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	}))
	defer srv.Close()
	tr := httpclient.NewTransport(httpclient.WithPipeline(pipeline.New(pipeline.WithRetry(retrypolicy.New(retrypolicy.BaseDelay(time.Millisecond))))))
	for _, withDeadline := range []bool{false, true} {
		mu.Lock()
		seen = nil
		mu.Unlock()
		ctx := context.Background()
		if withDeadline {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, 2*time.Second)
			defer cancel()
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
		require.NoError(t, err)
		req.Header["request-timeout-ms"] = []string{"999999"}
		req.Header["REQUEST-TIMEOUT-MS"] = []string{"888888"}
		req.Header["Request-Timeout-Ms"] = []string{"777777", "666666"}
		req.Header["rEqUeSt-TiMeOuT-mS"] = []string{"555555"}
		resp, err := tr.RoundTrip(req)
		require.NoError(t, err)
		resp.Body.Close()
		mu.Lock()
		require.Len(t, seen, 2, "a 503, then a retry")
		for i, raw := range seen {
			if !withDeadline {
				assert.Empty(t, raw, "attempt %d without a deadline", i+1)
				continue
			}
			require.Len(t, raw, 1, "attempt %d: %v", i+1, raw)
			ms, err := strconv.Atoi(raw[0])
			require.NoError(t, err)
			assert.LessOrEqual(t, ms, 2000, "attempt %d", i+1)
		}
		mu.Unlock()
		assert.Len(t, req.Header, 4, "the caller's request is not modified")
	}
}
