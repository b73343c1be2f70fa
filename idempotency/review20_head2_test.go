package idempotency_test

// From the second review of the HEAD change (the body of a HEAD not kept):
// the replay lost the Content-Type net/http guessed, and over HTTP/2 the
// Content-Length of 2049 to 4096 bytes. A HEAD's body is kept again while
// it fits MaxResponse, so that the replay makes net/http set the same;
// only one over it is not (and then not taken as truncated). A declared
// Trailer or Transfer-Encoding is not replayed, for any method (see
// docs/idempotency.md).

import (
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/resiliencekit/resiliencekit/idempotency"
)

// headTwice sends the same keyed HEAD twice to a server running h behind
// the middleware and returns both answers (status + headers minus Date
// and the replay mark).
func headTwice(t *testing.T, srv *httptest.Server, c *http.Client, key string) (first, replay *http.Response) {
	t.Helper()
	do := func() *http.Response {
		req, err := http.NewRequest(http.MethodHead, srv.URL+"/x", nil)
		require.NoError(t, err)
		req.Header.Set(idempotency.Header, key)
		resp, err := c.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		resp.Header.Del("Date")
		return resp
	}
	first = do()
	replay = do()
	require.Equal(t, "true", replay.Header.Get(idempotency.ReplayedHeader), "second is a replay")
	replay.Header.Del(idempotency.ReplayedHeader)
	return first, replay
}

func newHeadServer(t *testing.T, h http.HandlerFunc, h2 bool) (*httptest.Server, *http.Client) {
	mw := idempotency.Middleware(nil, idempotency.SharedKeys(), idempotency.Methods(http.MethodHead))
	srv := httptest.NewUnstartedServer(mw(h))
	if h2 {
		srv.EnableHTTP2 = true
		srv.StartTLS()
	} else {
		srv.Start()
	}
	t.Cleanup(srv.Close)
	c := srv.Client()
	if h2 {
		c.Transport.(*http.Transport).TLSClientConfig = &tls.Config{InsecureSkipVerify: true}
		c.Transport.(*http.Transport).ForceAttemptHTTP2 = true
	}
	return srv, c
}

// A HEAD handler that writes a small body and sets no Content-Type:
// net/http sniffs one from the bytes for the first answer; the replay,
// which has no body, carries none.
func TestReview20BHeadReplayLosesSniffedContentType(t *testing.T) {
	for _, h2 := range []bool{false, true} {
		t.Run(fmt.Sprintf("h2=%v", h2), func(t *testing.T) {
			srv, c := newHeadServer(t, func(w http.ResponseWriter, r *http.Request) {
				_, _ = io.WriteString(w, "<html><body>hello</body></html>")
			}, h2)
			first, replay := headTwice(t, srv, c, "k-ct")
			t.Logf("first:  %d %v", first.StatusCode, first.Header)
			t.Logf("replay: %d %v", replay.StatusCode, replay.Header)
			assert.Equal(t, first.StatusCode, replay.StatusCode)
			assert.Equal(t, first.Header.Get("Content-Type"), replay.Header.Get("Content-Type"), "Content-Type")
			assert.Equal(t, first.ContentLength, replay.ContentLength, "Content-Length")
		})
	}
}

// Over HTTP/2, net/http computes a HEAD's Content-Length from up to 4096
// buffered bytes (http2handlerChunkWriteSize), not 2048.
func TestReview20BHeadReplayH2ContentLengthOver2048(t *testing.T) {
	srv, c := newHeadServer(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		_, _ = io.WriteString(w, strings.Repeat("a", 3000))
	}, true)
	first, replay := headTwice(t, srv, c, "k-h2")
	require.Equal(t, 2, first.ProtoMajor)
	t.Logf("first:  %d CL=%d %v", first.StatusCode, first.ContentLength, first.Header)
	t.Logf("replay: %d CL=%d %v", replay.StatusCode, replay.ContentLength, replay.Header)
	assert.Equal(t, first.ContentLength, replay.ContentLength, "Content-Length")
}

// Sanity: the documented case works.
func TestReview20BHeadReplaySmallBodyCL(t *testing.T) {
	for _, h2 := range []bool{false, true} {
		srv, c := newHeadServer(t, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/plain")
			_, _ = io.WriteString(w, "hello")
		}, h2)
		first, replay := headTwice(t, srv, c, "k-ok")
		assert.EqualValues(t, 5, first.ContentLength)
		assert.Equal(t, first.ContentLength, replay.ContentLength)
		assert.Equal(t, first.Header, replay.Header)
	}
}
