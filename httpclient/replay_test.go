package httpclient_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"testing/iotest"
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

// TestAStalledStreamEndsWithTheCallersContext: a streamed PUT whose
// writer stops writing (a pipe) to a server that reads to the end ends
// when the caller's context does, its body closed, where a plain
// transport waits for the body for good.
func TestAStalledStreamEndsWithTheCallersContext(t *testing.T) {
	srv := newServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
	}))
	hc := &http.Client{Transport: httpclient.NewTransport(fastRetry())}
	pr, pw := io.Pipe()
	go func() { _, _ = pw.Write(make([]byte, 10<<10)) }() // and no more, nor the end
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, srv.URL, pr)
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() {
		_, err := hc.Do(req)
		done <- err
	}()
	select {
	case err := <-done:
		require.ErrorIs(t, err, context.DeadlineExceeded)
	case <-time.After(10 * time.Second):
		pw.CloseWithError(errors.New("the test ends it"))
		t.Fatal("the request outlived its context by 10 s")
	}
	_, err = pw.Write([]byte("x"))
	assert.ErrorIs(t, err, io.ErrClosedPipe, "the body was closed")
}

// cutBase is a base that reads cutAt bytes of the first attempt's body
// and fails it as a server cutting the upload does, then reads the next
// attempt's whole.
type cutBase struct {
	cutAt int64
	n     int
	got   []byte
}

func (b *cutBase) RoundTrip(r *http.Request) (*http.Response, error) {
	defer r.Body.Close()
	if b.n++; b.n == 1 {
		_, _ = io.CopyN(io.Discard, r.Body, b.cutAt)
		return nil, &net.OpError{Op: "write", Net: "tcp", Err: os.NewSyscallError("write", syscall.ECONNRESET)}
	}
	var err error
	if b.got, err = io.ReadAll(r.Body); err != nil {
		return nil, err
	}
	return &http.Response{StatusCode: http.StatusOK, Body: http.NoBody, Request: r}, nil
}

// TestAStreamIsReplayedByteExact: what the attempts read of a stream,
// kept for its retry, is sent again whole and unchanged, whatever its
// length and however the stream cuts its reads.
func TestAStreamIsReplayedByteExact(t *testing.T) {
	for _, size := range []int{0, 1, 4095, 4096, 4097, 12287, 12288, 12289, 300_000} {
		for _, cutAt := range []int64{0, 1, 5000} {
			body := make([]byte, size)
			for i := range body {
				body[i] = byte(i*7 + i/251)
			}
			base := &cutBase{cutAt: cutAt}
			tr := httpclient.NewTransport(httpclient.Base(base), fastRetry())
			req, err := http.NewRequest(http.MethodPut, "http://replay.test/", io.NopCloser(iotest.HalfReader(bytes.NewReader(body))))
			require.NoError(t, err)
			req.ContentLength = -1
			resp, err := tr.RoundTrip(req)
			require.NoError(t, err, "size %d, cut at %d", size, cutAt)
			resp.Body.Close()
			assert.Equal(t, 2, base.n)
			assert.True(t, bytes.Equal(body, base.got), "size %d, cut at %d: the retry sent other bytes", size, cutAt)
		}
	}
}
