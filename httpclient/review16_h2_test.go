package httpclient_test

import (
	"bufio"
	"encoding/binary"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/httpclient"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/resilience"
)

// TestReview16InnocentStreamOnConnWithOversizedHeader: over HTTP/2, one
// request whose answer has a header over MaxResponseHeaderBytes kills the
// whole connection with COMPRESSION_ERROR; every other request in flight on
// it gets the same error, which is now "the caller's own": not retried, so a
// GET that a retry on a new connection would complete fails.
func TestReview16InnocentStreamOnConnWithOversizedHeader(t *testing.T) {
	var slowN atomic.Int64
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/slow":
			if slowN.Add(1) == 1 {
				time.Sleep(300 * time.Millisecond)
			}
			_, _ = io.WriteString(w, "ok")
		case "/big":
			w.Header().Set("X-Big", strings.Repeat("a", 6000))
			_, _ = io.WriteString(w, "big")
		default:
			_, _ = io.WriteString(w, "warm")
		}
	}))
	srv.EnableHTTP2 = true
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	srv.StartTLS()
	defer srv.Close()
	base := &http.Transport{
		TLSClientConfig:        srv.Client().Transport.(*http.Transport).TLSClientConfig.Clone(),
		ForceAttemptHTTP2:      true,
		MaxResponseHeaderBytes: 4096,
	}
	defer base.CloseIdleConnections()
	c := &http.Client{Transport: httpclient.NewTransport(httpclient.Base(base), fastRetry())}

	resp, err := c.Get(srv.URL + "/warm")
	require.NoError(t, err)
	_, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, 2, resp.ProtoMajor)

	slowErr := make(chan error, 1)
	go func() {
		resp, err := c.Get(srv.URL + "/slow")
		if err == nil {
			_, _ = io.ReadAll(resp.Body)
			resp.Body.Close()
		}
		slowErr <- err
	}()
	time.Sleep(100 * time.Millisecond)
	_, bigErr := c.Get(srv.URL + "/big")
	t.Logf("big: %v", bigErr)
	err = <-slowErr
	t.Logf("slow: %v (class %v), /slow served %d times", err, resilience.Classify(err), slowN.Load())
	if err != nil { // its retries may meet /big's on the next connections: retried is what counts
		assert.Greater(t, slowN.Load(), int64(1), "an innocent GET on the same connection is retried on a new one")
	}
}

// frame writes an HTTP/2 frame.
func frame(w io.Writer, typ, flags byte, stream uint32, payload []byte) {
	var h [9]byte
	h[0], h[1], h[2] = byte(len(payload)>>16), byte(len(payload)>>8), byte(len(payload))
	h[3], h[4] = typ, flags
	binary.BigEndian.PutUint32(h[5:], stream)
	_, _ = w.Write(append(h[:], payload...))
}

// brokenHPACK is an h2c server whose every answer's header block does not
// decode (an indexed field of index 0): a server (or proxy) fault.
func brokenHPACK(t *testing.T) (addr string, served *atomic.Int64) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { ln.Close() })
	served = new(atomic.Int64)
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer conn.Close()
				br := bufio.NewReader(conn)
				pre := make([]byte, 24)
				if _, err := io.ReadFull(br, pre); err != nil {
					return
				}
				frame(conn, 0x4, 0, 0, nil) // SETTINGS
				for {
					var h [9]byte
					if _, err := io.ReadFull(br, h[:]); err != nil {
						return
					}
					n := int(h[0])<<16 | int(h[1])<<8 | int(h[2])
					if _, err := io.CopyN(io.Discard, br, int64(n)); err != nil {
						return
					}
					typ, flags, id := h[3], h[4], binary.BigEndian.Uint32(h[5:])&0x7fffffff
					switch {
					case typ == 0x4 && flags&1 == 0:
						frame(conn, 0x4, 1, 0, nil) // SETTINGS ACK
					case typ == 0x1:
						served.Add(1)
						frame(conn, 0x1, 0x5, id, []byte{0x80}) // HEADERS, END_HEADERS|END_STREAM, broken block
					}
				}
			}()
		}
	}()
	return ln.Addr().String(), served
}

// TestReview16BrokenHPACKFromServerCounts: a server that answers with a
// header block that does not decode is at fault; its failures must count.
func TestReview16BrokenHPACKFromServerCounts(t *testing.T) {
	addr, served := brokenHPACK(t)
	base := &http.Transport{Protocols: new(http.Protocols)}
	base.Protocols.SetUnencryptedHTTP2(true)
	defer base.CloseIdleConnections()
	// plain client, to see the error
	_, perr := (&http.Client{Transport: base}).Get("http://" + addr + "/")
	t.Logf("plain client: %v", perr)
	require.Error(t, perr)

	b := breaker.New("dep", breaker.ConsecutiveFailures(3))
	c := &http.Client{Transport: httpclient.NewTransport(httpclient.Base(base), fastRetry(pipeline.WithBreaker(b)))}
	served.Store(0)
	var err error
	for range 5 {
		_, err = c.Get("http://" + addr + "/")
	}
	t.Logf("class %v, served %d, breaker %+v state %v: %v", resilience.Classify(err), served.Load(), b.Counts(), b.State(), err)
	assert.NotEqual(t, resilience.ClassRejected, resilience.Classify(err), "a server's broken HPACK is the server's fault")
	assert.True(t, b.State() == resilience.StateOpen || b.Counts().TotalFailures > 0, "the server's failures count")
}
