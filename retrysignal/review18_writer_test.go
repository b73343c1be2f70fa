package retrysignal_test

import (
	"crypto/tls"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/resiliencekit/resiliencekit/retrysignal"
)

type r18Seen struct{ flusher, hijacker bool }

func r18Handler(seen *r18Seen, flush bool) retrysignal.Handler {
	return func(w http.ResponseWriter, r *http.Request) error {
		_, seen.flusher = w.(http.Flusher)
		_, seen.hijacker = w.(http.Hijacker)
		if flush {
			w.Header().Set("Content-Type", "text/event-stream")
			if f, ok := w.(http.Flusher); ok {
				f.Flush()
			}
		}
		return errors.New("upstream down")
	}
}

func TestReview18HTTP2AndHTTP1Writers(t *testing.T) {
	for _, h2 := range []bool{false, true} {
		var seen r18Seen
		srv := httptest.NewUnstartedServer(r18Handler(&seen, true))
		srv.EnableHTTP2 = h2
		srv.StartTLS()
		c := srv.Client()
		resp, err := c.Get(srv.URL)
		require.NoError(t, err)
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		t.Logf("h2=%v proto %s: seen %+v status %d body %q", h2, resp.Proto, seen, resp.StatusCode, b)
		assert.True(t, seen.flusher)
		assert.Equal(t, !h2, seen.hijacker)
		assert.Equal(t, http.StatusOK, resp.StatusCode)
		assert.Empty(t, b, "the error must not be written into a started stream")
		srv.Close()
	}
	_ = tls.VersionTLS12
}

func TestReview18Recorder(t *testing.T) {
	var seen r18Seen
	rec := httptest.NewRecorder()
	r18Handler(&seen, true).ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
	assert.True(t, seen.flusher)
	assert.False(t, seen.hijacker)
	assert.True(t, rec.Flushed)
	assert.Empty(t, rec.Body.String())
	t.Logf("%d %q", rec.Code, rec.Body.String())
}

// unwrapWriter is a middleware's writer that implements neither Flusher nor
// Hijacker but has Unwrap, as http.ResponseController asks (Go 1.20+).
type unwrapWriter struct{ http.ResponseWriter }

func (w unwrapWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// TestReview18ControllerFlushThroughUnwrapMiddleware: the handler flushes its
// SSE headers with http.ResponseController (the recommended way), through a
// middleware writer that unwraps; the response has started (200 sent), then
// the outbound call fails. The error must not be written into the stream.
func TestReview18ControllerFlushThroughUnwrapMiddleware(t *testing.T) {
	h := retrysignal.Handler(func(w http.ResponseWriter, r *http.Request) error {
		w.Header().Set("Content-Type", "text/event-stream")
		if err := http.NewResponseController(w).Flush(); err != nil {
			t.Errorf("flush: %v", err)
		}
		return errors.New("upstream down")
	})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(unwrapWriter{w}, r)
	}))
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	require.NoError(t, err)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	t.Logf("status %d, content-type %q, body %q", resp.StatusCode, resp.Header.Get("Content-Type"), b)
	assert.Empty(t, b, "an error body written into a started event stream")
}

// TestReview18WriteAfterHijack: hijack by w.(http.Hijacker) on HTTP/1.1, write
// on the conn, return an error: logged, nothing written through w.
func TestReview18WriteAfterHijack(t *testing.T) {
	h := retrysignal.Handler(func(w http.ResponseWriter, r *http.Request) error {
		c, rw, err := w.(http.Hijacker).Hijack()
		if err != nil {
			return err
		}
		_, _ = rw.WriteString("HTTP/1.1 204 No Content\r\nConnection: close\r\n\r\n")
		_ = rw.Flush()
		_, werr := w.Write([]byte("x"))
		t.Logf("write after hijack: %v", werr)
		c.Close()
		return errors.New("upstream down")
	})
	srv := httptest.NewServer(h)
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusNoContent, resp.StatusCode)
}
