package httpclient_test

import (
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/httpclient"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/resilience"
)

// TestReview18H2CompressionErrorCounted: a single response header over
// MaxResponseHeaderBytes over HTTP/2 (COMPRESSION_ERROR) is transient and
// counted; over HTTP/1.1 the same answer is the caller's (rejected).
func TestReview18H2CompressionErrorCounted(t *testing.T) {
	for _, h2 := range []bool{true, false} {
		srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("X-Big", strings.Repeat("a", 6000))
			_, _ = io.WriteString(w, "big")
		}))
		srv.EnableHTTP2 = h2
		srv.Config.ErrorLog = log.New(io.Discard, "", 0)
		srv.StartTLS()
		base := &http.Transport{
			TLSClientConfig:        srv.Client().Transport.(*http.Transport).TLSClientConfig.Clone(),
			ForceAttemptHTTP2:      h2,
			MaxResponseHeaderBytes: 4096,
		}
		b := breaker.New("dep", breaker.ConsecutiveFailures(2), breaker.OpenTimeout(time.Minute))
		c := &http.Client{Transport: httpclient.NewTransport(httpclient.Base(base), fastRetry(pipeline.WithBreaker(b)))}
		var last error
		for range 3 {
			_, last = c.Get(srv.URL)
		}
		t.Logf("h2=%v: %v (%v), breaker %v", h2, last, resilience.Classify(last), b.State())
		if h2 {
			assert.Equal(t, resilience.StateOpen, b.State())
		}
		base.CloseIdleConnections()
		srv.Close()
	}
}
