package retrysignal_test

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/resiliencekit/resiliencekit/retrysignal"
)

// plainWriter is a middleware's ResponseWriter wrapper that does not
// flush (no Flush, no Unwrap): common in logging/metrics middleware.
type plainWriter struct{ http.ResponseWriter }

// TestReview16FlushOnWriterThatCannotFlush: the handler flushes (a no-op
// here: nothing is sent), then its outbound call fails. Nothing was sent,
// so the error must still be answered; Flush marked the response started.
func TestReview16FlushOnWriterThatCannotFlush(t *testing.T) {
	h := retrysignal.Handler(func(w http.ResponseWriter, r *http.Request) error {
		w.Header().Set("Content-Type", "text/event-stream")
		if f, ok := w.(http.Flusher); ok {
			f.Flush()
		}
		return errors.New("upstream down")
	})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(plainWriter{w}, r)
	}))
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	require.NoError(t, err)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	t.Logf("status %d, body %q", resp.StatusCode, b)
	assert.NotEqual(t, http.StatusOK, resp.StatusCode, "an error answered as an empty 200")
}

// TestReview16HijackThenError: a handler that hijacks, answers on the
// connection itself, then returns an error: no second answer is written.
func TestReview16HijackThenError(t *testing.T) {
	h := retrysignal.Handler(func(w http.ResponseWriter, r *http.Request) error {
		c, rw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return err
		}
		defer c.Close()
		_, _ = rw.WriteString("HTTP/1.1 204 No Content\r\nConnection: close\r\n\r\n")
		_ = rw.Flush()
		return errors.New("after hijack")
	})
	srv := httptest.NewServer(h)
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusNoContent, resp.StatusCode)
}
