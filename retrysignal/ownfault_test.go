package retrysignal_test

import (
	"context"
	"crypto/tls"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/resiliencekit/resiliencekit/httpclient"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
	"github.com/resiliencekit/resiliencekit/retrysignal"
)

// failingBody is a request body whose read fails with err.
type failingBody struct{ err error }

func (b failingBody) Read([]byte) (int, error) { return 0, b.err }
func (failingBody) Close() error               { return nil }

// The status a service answers for an error its httpclient made on this
// side (review102, review106, review107): 500 for a request that was at
// fault, a certificate it does not trust included (grpcsignal's INTERNAL,
// where a 502 read UNAVAILABLE, which gRPC clients retry), and a
// context's own for a caller's body reader that gave up; never the 503 of
// the pipeline's refusals.
func TestStatusOfTheClientsOwnErrors(t *testing.T) {
	tlsSrv := httptest.NewTLSServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	defer tlsSrv.Close()
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	defer srv.Close()
	p := pipeline.New(pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(2), retrypolicy.BaseDelay(0))))
	client := &http.Client{Transport: httpclient.NewTransport(httpclient.WithPipeline(p), httpclient.Base(&http.Transport{TLSClientConfig: &tls.Config{}}))}
	post := func(url string, body failingBody) func() *http.Request {
		return func() *http.Request {
			r, _ := http.NewRequest(http.MethodPut, url, body)
			r.ContentLength = 10
			return r
		}
	}
	get := func(url string) func() *http.Request {
		return func() *http.Request { r, _ := http.NewRequest(http.MethodGet, url, nil); return r }
	}
	tests := []struct {
		name string
		req  func() *http.Request
		want int
	}{
		{"unsupported scheme", get("ftp://127.0.0.1:1/x"), http.StatusInternalServerError},
		{"no host", get("http:///x"), http.StatusInternalServerError},
		{"untrusted certificate", get(tlsSrv.URL), http.StatusInternalServerError},
		{"body that fails to read", post(srv.URL, failingBody{errors.New("disk")}), http.StatusInternalServerError},
		{"body reader out of time", post(srv.URL, failingBody{context.DeadlineExceeded}), http.StatusGatewayTimeout},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_, err := client.Do(tc.req().WithContext(ctx))
			if !assert.Error(t, err) {
				return
			}
			assert.Equal(t, tc.want, retrysignal.Status(err), "%v", err)
			w := httptest.NewRecorder()
			retrysignal.WriteError(w, err)
			assert.Equal(t, tc.want, w.Code)
			assert.True(t, strings.Contains(w.Body.String(), `"status":`))
		})
	}
}
