package retrysignal_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/resiliencekit/resiliencekit/retrysignal"
)

// WriteError drops "headers the handler set that would contradict it
// (Content-Length, Retry-After)". A handler that prepared a compressed,
// cacheable answer before its outbound call failed leaves
// Content-Encoding: gzip on the plain JSON problem document, which a Go
// client (that asked for gzip itself) cannot read, and Cache-Control /
// ETag that let a cache keep the 503 as the resource.
func TestReview21WriteErrorKeepsContradictingHeaders(t *testing.T) {
	srv := httptest.NewServer(retrysignal.Handler(func(w http.ResponseWriter, r *http.Request) error {
		w.Header().Set("Content-Encoding", "gzip")
		w.Header().Set("Cache-Control", "public, max-age=3600")
		w.Header().Set("ETag", `"v1"`)
		return errors.New("dependency down")
	}))
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, readErr := io.ReadAll(resp.Body)
	t.Logf("status %d, headers %v, body %q, read error %v", resp.StatusCode, resp.Header, body, readErr)
	assert.NoError(t, readErr, "the problem document must be readable")
	assert.Empty(t, resp.Header.Get("ETag"))
	assert.NotContains(t, resp.Header.Get("Cache-Control"), "max-age=3600")
}
