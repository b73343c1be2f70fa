package httpclient_test

import (
	"bytes"
	"crypto/sha256"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/resiliencekit/resiliencekit/hedge"
	"github.com/resiliencekit/resiliencekit/httpclient"
	"github.com/resiliencekit/resiliencekit/pipeline"
)

// TestAStreamedBodyIsKeptForItsRetry: a PUT whose body has no length and
// no GetBody (a pipe, an encoder's stream) is sent as it is read, and
// what was read is kept: after the server read half of it and cut the
// connection, the retry sends it whole, the same bytes.
func TestAStreamedBodyIsKeptForItsRetry(t *testing.T) {
	body := bytes.Repeat([]byte("0123456789abcdef"), 8<<10) // 128 KiB
	var n atomic.Int32
	var mu sync.Mutex
	var sums [][32]byte
	srv := newServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n.Add(1) == 1 {
			_, _ = io.CopyN(io.Discard, r.Body, int64(len(body)/2))
			panic(http.ErrAbortHandler)
		}
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		sums = append(sums, sha256.Sum256(b))
		mu.Unlock()
	}))
	hc := &http.Client{Transport: httpclient.NewTransport(fastRetry())}
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPut, srv.URL, onceReader{bytes.NewReader(body)})
	require.NoError(t, err)
	resp, err := hc.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	assert.EqualValues(t, 2, n.Load())
	assert.Equal(t, [][32]byte{sha256.Sum256(body)}, sums)
}

// TestAHedgeNeverReadsAStreamBeingSent: with hedging, a hedge due while
// the first attempt still reads the caller's stream is refused (it would
// read the same stream at once); the call completes with the first.
func TestAHedgeNeverReadsAStreamBeingSent(t *testing.T) {
	var n atomic.Int32
	srv := newServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		b, _ := io.ReadAll(r.Body)
		_, _ = w.Write(b)
	}))
	p := pipeline.New(pipeline.WithHedging(hedge.New(hedge.Delay(5*time.Millisecond), hedge.MaxShare(1))))
	hc := &http.Client{Transport: httpclient.NewTransport(httpclient.WithPipeline(p))}
	pr, pw := io.Pipe()
	go func() {
		for i := range 5 {
			time.Sleep(10 * time.Millisecond) // slower than the hedging delay
			_, _ = io.WriteString(pw, strings.Repeat(string(rune('a'+i)), 100))
		}
		pw.Close()
	}()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPut, srv.URL, pr)
	require.NoError(t, err)
	resp, err := hc.Do(req)
	require.NoError(t, err)
	got, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	assert.Equal(t, strings.Repeat("a", 100)+strings.Repeat("b", 100)+strings.Repeat("c", 100)+strings.Repeat("d", 100)+strings.Repeat("e", 100), string(got))
	assert.EqualValues(t, 1, n.Load(), "no hedge was sent")
}
