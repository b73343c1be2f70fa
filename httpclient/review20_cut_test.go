package httpclient_test

// From the review of cutRequest's first version, which took every write
// cut by a reset, for a request with a body, as the server refusing it:
// an upload cut by a crash, a crash loop or a keep-alive close was not
// retried, and a dead dependency behind nginx never opened the breaker.
// The comments below describe what the first version did; the tests hold
// what it does now: a retried body's cut is transient.

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/httpclient"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/resilience"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

// zzCrashOnce listens on a free port; its first connection "crashes" (the
// process dies: the kernel resets the socket, unread data and all) after
// reading the request line and a few KiB; then a healthy net/http server
// takes the port over (the restarted process, or another replica behind a
// TCP load balancer). It returns the address and how many requests the
// healthy server completed.
func zzCrashOnce(t *testing.T) (string, *atomic.Int32) {
	t.Helper()
	// A server that takes an upload at the pace of its disk or of a far
	// client: a small receive window.
	lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		return c.Control(func(fd uintptr) {
			if zzSmallRcvbuf {
				_ = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 16<<10)
			}
		})
	}}
	l, err := lc.Listen(context.Background(), "tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	var served atomic.Int32
	healthy := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, _ := io.Copy(io.Discard, r.Body)
		served.Add(1)
		fmt.Fprintf(w, "stored %d bytes", n)
	})}
	t.Cleanup(func() { healthy.Close() })
	go func() {
		c, err := l.Accept()
		if err != nil {
			return
		}
		buf := make([]byte, 16<<10)
		_, _ = io.ReadAtLeast(c, buf, 8<<10) // the upload has begun
		time.Sleep(50 * time.Millisecond)    // and goes on, until the crash
		// Crash: the port is taken by the restarted server at once (a
		// supervisor, or another replica), and the kernel resets the dead
		// process's connection.
		l.Close()
		l2, err := net.Listen("tcp", addr)
		if err != nil {
			panic(err)
		}
		go healthy.Serve(l2)
		c.(*net.TCPConn).SetLinger(0)
		c.Close()
	}()
	return addr, &served
}

// plainDo is a plain client with its own retry, as go-retryablehttp does:
// up to 4 attempts on a connection error, 50 ms apart.
func plainDo(req func() *http.Request) (*http.Response, error) {
	c := &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone()}
	var err error
	for i := 0; i < 4; i++ {
		var resp *http.Response
		resp, err = c.Do(req())
		if err == nil {
			return resp, nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return nil, err
}

func TestReview20PlainHTTPChunkedPUTCrashIsRetried(t *testing.T) {
	body := bytes.Repeat([]byte("x"), zzCrashSize)
	newReq := func(addr string) func() *http.Request {
		return func() *http.Request {
			// A body whose length net/http does not know (a reader of the
			// caller's: a pipe from an encoder, a gzip stream): sent chunked.
			r, _ := http.NewRequest(http.MethodPut, "http://"+addr+"/objects/1", io.MultiReader(bytes.NewReader(body)))
			return r
		}
	}

	// A plain client with its own retry completes.
	addr, served := zzCrashOnce(t)
	resp, err := plainDo(newReq(addr))
	require.NoError(t, err, "plain client")
	resp.Body.Close()
	require.EqualValues(t, 1, served.Load())

	// The toolkit, which retries PUT by default.
	addr, served = zzCrashOnce(t)
	tr := httpclient.NewTransport(httpclient.Base(zzLog{t, http.DefaultTransport.(*http.Transport).Clone()}))
	resp, err = (&http.Client{Transport: tr}).Do(newReq(addr)())
	if err != nil {
		t.Logf("class %v: %v", resilience.Classify(err), err)
	}
	require.NoError(t, err, "a PUT whose server crashed mid-upload and restarted: a plain client with a retry completes it")
	resp.Body.Close()
	require.EqualValues(t, 1, served.Load())
}

var _ = bufio.NewReader
var _ = strings.Contains
var _ = errors.Is
var _ = context.Background
var _ = breaker.New
var _ = pipeline.New
var _ = retrypolicy.New

// zzLog logs each attempt's error.
type zzLog struct {
	t  *testing.T
	rt http.RoundTripper
}

func (l zzLog) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := l.rt.RoundTrip(r)
	if err != nil {
		var op *net.OpError
		errors.As(err, &op)
		l.t.Logf("attempt %s: %v (op %v)", r.Header.Get("Request-Attempt"), err, op != nil && op.Op == "write")
	}
	return resp, err
}

// zzCounting counts the attempts that reach the base transport.
type zzCounting struct {
	n  atomic.Int32
	rt http.RoundTripper
	t  *testing.T
}

func (c *zzCounting) RoundTrip(r *http.Request) (*http.Response, error) {
	c.n.Add(1)
	resp, err := c.rt.RoundTrip(r)
	if err != nil && c.t != nil {
		c.t.Logf("attempt %s: %v", r.Header.Get("Request-Attempt"), err)
	}
	return resp, err
}

func TestReview20NginxOversizedBody(t *testing.T) {
	addr := startNginx(t, `client_max_body_size 1k; lingering_close off; location / { return 200 "ok\n"; }`)
	b := breaker.New("orders", breaker.ConsecutiveFailures(3), breaker.OpenTimeout(time.Minute))
	p := pipeline.New(pipeline.WithBreaker(b), pipeline.WithRetry(retrypolicy.New(retrypolicy.BaseDelay(time.Millisecond))))
	base := &zzCounting{rt: http.DefaultTransport.(*http.Transport).Clone(), t: t}
	hc := &http.Client{Transport: httpclient.NewTransport(httpclient.WithPipeline(p), httpclient.Base(base))}
	body := bytes.Repeat([]byte("x"), zzSize) // a caller's oversized upload
	for i := 0; i < 3; i++ {
		var rd io.Reader = bytes.NewReader(body)
		if zzChunked {
			rd = io.MultiReader(rd)
		}
		req, _ := http.NewRequest(http.MethodPut, "http://"+addr+"/upload", rd)
		resp, err := hc.Do(req)
		if err == nil {
			resp.Body.Close()
			continue
		}
		t.Logf("call %d: class %v: %v", i, resilience.Classify(err), err)
	}
	t.Logf("attempts sent: %d", base.n.Load())
	// The dependency is healthy: a GET must go through.
	resp, err := hc.Get("http://" + addr + "/health")
	require.NoError(t, err, "a healthy nginx, after a caller's oversized uploads")
	resp.Body.Close()
}

var zzSize = 4 << 20
var zzChunked = true

var zzCrashSize = 1 << 20

// zzTLSCrashOnce is zzCrashOnce over TLS: the first connection's server
// dies mid-upload, a healthy one takes the port over at once. It returns
// the address, the count of requests served and a base transport that
// trusts the servers' certificate.
func zzTLSCrashOnce(t *testing.T) (string, *atomic.Int32, *http.Transport) {
	t.Helper()
	var served atomic.Int32
	healthy := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, _ := io.Copy(io.Discard, r.Body)
		served.Add(1)
		fmt.Fprintf(w, "stored %d bytes", n)
	}))
	lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		return c.Control(func(fd uintptr) {
			if zzSmallRcvbuf {
				_ = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 16<<10)
			}
		})
	}}
	l, err := lc.Listen(context.Background(), "tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	healthy.StartTLS() // on a port of its own for now: for its certificate
	t.Cleanup(healthy.Close)
	cfg := &tls.Config{Certificates: healthy.TLS.Certificates}
	base := healthy.Client().Transport.(*http.Transport).Clone()
	restarted := &http.Server{Handler: healthy.Config.Handler, TLSConfig: cfg}
	t.Cleanup(func() { restarted.Close(); base.CloseIdleConnections() })
	go func() {
		raw, err := l.Accept()
		if err != nil {
			return
		}
		c := tls.Server(raw, cfg)
		buf := make([]byte, 16<<10)
		_, _ = io.ReadAtLeast(c, buf, 8<<10) // the upload has begun
		time.Sleep(50 * time.Millisecond)    // and goes on, until the crash
		l.Close()
		l2, err := net.Listen("tcp", addr)
		if err != nil {
			panic(err)
		}
		go restarted.ServeTLS(l2, "", "")
		raw.(*net.TCPConn).SetLinger(0)
		raw.Close()
	}()
	return addr, &served, base
}

func TestReview20HTTPSPutCutByACrashIsRetried(t *testing.T) {
	body := bytes.Repeat([]byte("x"), 8<<20) // an 8 MiB upload, rewindable (GetBody)
	newReq := func(addr string) *http.Request {
		r, _ := http.NewRequest(http.MethodPut, "https://"+addr+"/objects/1", bytes.NewReader(body))
		return r
	}
	// A plain client with its own retry completes.
	addr, served, base := zzTLSCrashOnce(t)
	c := &http.Client{Transport: base}
	var err error
	for i := 0; i < 4; i++ {
		var resp *http.Response
		if resp, err = c.Do(newReq(addr)); err == nil {
			resp.Body.Close()
			break
		}
		t.Logf("plain attempt %d: %v", i+1, err)
		time.Sleep(50 * time.Millisecond)
	}
	require.NoError(t, err, "plain client")
	require.EqualValues(t, 1, served.Load())

	// The toolkit, which retries a PUT by default.
	addr, served, base = zzTLSCrashOnce(t)
	counting := &zzCounting{rt: base, t: t}
	hc := &http.Client{Transport: httpclient.NewTransport(httpclient.Base(counting))}
	resp, err := hc.Do(newReq(addr))
	if err != nil {
		t.Logf("class %v after %d attempt(s)", resilience.Classify(err), counting.n.Load())
	}
	require.NoError(t, err, "an HTTPS PUT whose server crashed mid-upload and came back: a plain client with a retry completes it")
	resp.Body.Close()
	require.EqualValues(t, 1, served.Load())
}

var zzSmallRcvbuf = false

// zzCertFiles writes the certificate and key of an httptest TLS server to
// files, for nginx, and returns their paths and a transport trusting it.
func zzCertFiles(t *testing.T) (string, string, *http.Transport) {
	t.Helper()
	ts := httptest.NewTLSServer(http.NotFoundHandler())
	t.Cleanup(ts.Close)
	cert := ts.TLS.Certificates[0]
	dir := t.TempDir()
	var certPEM bytes.Buffer
	for _, der := range cert.Certificate {
		require.NoError(t, pem.Encode(&certPEM, &pem.Block{Type: "CERTIFICATE", Bytes: der}))
	}
	key, err := x509.MarshalPKCS8PrivateKey(cert.PrivateKey)
	require.NoError(t, err)
	crt, kf := filepath.Join(dir, "c.pem"), filepath.Join(dir, "k.pem")
	require.NoError(t, os.WriteFile(crt, certPEM.Bytes(), 0o644))
	require.NoError(t, os.WriteFile(kf, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: key}), 0o644))
	os.Chmod(dir, 0o755)
	base := ts.Client().Transport.(*http.Transport).Clone()
	t.Cleanup(base.CloseIdleConnections)
	return crt, kf, base
}

// A TLS-terminating nginx in front of a dead backend (nothing listens on
// its port). Uploads to it are cut with a reset, as in the case the fix
// was made for: they are now class rejected, so the breaker never opens
// and every call keeps sending its whole upload to a dead dependency.
func TestReview20DeadBackendBehindNginxTLSOpensTheBreaker(t *testing.T) {
	dead, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	deadAddr := dead.Addr().String()
	dead.Close() // the backend is down
	crt, key, base := zzCertFiles(t)
	addr := startNginx(t, fmt.Sprintf(`ssl on; ssl_certificate %s; ssl_certificate_key %s;
		lingering_close off; client_max_body_size 100m;
		location / { proxy_pass http://%s; proxy_request_buffering off; }`, crt, key, deadAddr))

	b := breaker.New("storage", breaker.ConsecutiveFailures(3), breaker.OpenTimeout(time.Minute))
	p := pipeline.New(pipeline.WithBreaker(b), pipeline.WithRetry(retrypolicy.New(retrypolicy.BaseDelay(time.Millisecond))))
	counting := &zzCounting{rt: base}
	hc := &http.Client{Transport: httpclient.NewTransport(httpclient.WithPipeline(p), httpclient.Base(counting))}

	body := bytes.Repeat([]byte("x"), 8<<20)
	var classes []string
	for i := 0; i < 10; i++ {
		req, _ := http.NewRequest(http.MethodPut, "https://"+addr+"/objects/"+fmt.Sprint(i), bytes.NewReader(body))
		resp, err := hc.Do(req)
		if err == nil {
			classes = append(classes, resp.Status)
			resp.Body.Close()
			continue
		}
		classes = append(classes, resilience.Classify(err).String())
		if i == 0 {
			t.Logf("PUT: %v", err)
		}
	}
	t.Logf("10 PUTs: %v; attempts that reached nginx: %d", classes, counting.n.Load())
	require.NotContains(t, classes, resilience.ClassRejected.String(),
		"the backend is dead: no failure of a call to it may be left uncounted by the breaker")
}

// A backend in a crash loop: every upload kills it (an out-of-memory kill
// as it parses the body) and it comes back for the next connection. Over
// TLS, every PUT fails with a write reset, class rejected: the breaker
// (3 consecutive failures) never opens, and the dependency is hammered.
func TestReview20CrashLoopingBackendOpensTheBreaker(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })
	_, _, base := zzCertFiles(t)
	ts := httptest.NewUnstartedServer(http.NotFoundHandler())
	ts.StartTLS()
	t.Cleanup(ts.Close)
	cfg := &tls.Config{Certificates: ts.TLS.Certificates}
	base = ts.Client().Transport.(*http.Transport).Clone()
	t.Cleanup(base.CloseIdleConnections)
	var accepted atomic.Int32
	go func() {
		for {
			raw, err := l.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			go func() {
				c := tls.Server(raw, cfg)
				buf := make([]byte, 16<<10)
				_, _ = io.ReadAtLeast(c, buf, 8<<10) // the upload has begun: the crash
				raw.(*net.TCPConn).SetLinger(0)
				raw.Close()
			}()
		}
	}()
	b := breaker.New("storage", breaker.ConsecutiveFailures(3), breaker.OpenTimeout(time.Minute))
	p := pipeline.New(pipeline.WithBreaker(b), pipeline.WithRetry(retrypolicy.New(retrypolicy.BaseDelay(time.Millisecond))))
	hc := &http.Client{Transport: httpclient.NewTransport(httpclient.WithPipeline(p), httpclient.Base(base))}
	body := bytes.Repeat([]byte("x"), 8<<20)
	var classes []string
	for i := 0; i < 10; i++ {
		req, _ := http.NewRequest(http.MethodPut, "https://"+l.Addr().String()+"/objects/"+fmt.Sprint(i), bytes.NewReader(body))
		resp, err := hc.Do(req)
		if err == nil {
			resp.Body.Close()
			classes = append(classes, resp.Status)
			continue
		}
		classes = append(classes, resilience.Classify(err).String())
	}
	t.Logf("10 PUTs: %v; connections to the crashing backend: %d", classes, accepted.Load())
	require.LessOrEqual(t, accepted.Load(), int32(3*4),
		"every upload kills the backend: the breaker (3 consecutive failures) should open and stop sending")
	require.ErrorIs(t, func() error {
		req, _ := http.NewRequest(http.MethodPut, "https://"+l.Addr().String()+"/objects/x", bytes.NewReader(body))
		resp, err := hc.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		return err
	}(), breaker.ErrOpen)
}

type zzConnKey struct{}

// Over HTTP/2: the same crash-looping backend, as a real net/http server
// whose handler dies (its TCP connection reset) as an upload begins.
func TestReview20H2CrashLoopingBackend(t *testing.T) {
	var proto atomic.Value
	ts := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		proto.Store(r.Proto)
		buf := make([]byte, 16<<10)
		_, _ = io.ReadAtLeast(r.Body, buf, 8<<10)
		raw := r.Context().Value(zzConnKey{}).(*tls.Conn).NetConn().(*net.TCPConn)
		raw.SetLinger(0)
		raw.Close()
	}))
	ts.EnableHTTP2 = true
	ts.Config.ConnContext = func(ctx context.Context, c net.Conn) context.Context {
		return context.WithValue(ctx, zzConnKey{}, c)
	}
	ts.StartTLS()
	t.Cleanup(ts.Close)
	base := ts.Client().Transport.(*http.Transport)
	b := breaker.New("storage", breaker.ConsecutiveFailures(3), breaker.OpenTimeout(time.Minute))
	p := pipeline.New(pipeline.WithBreaker(b), pipeline.WithRetry(retrypolicy.New(retrypolicy.BaseDelay(time.Millisecond))))
	counting := &zzCounting{rt: base}
	hc := &http.Client{Transport: httpclient.NewTransport(httpclient.WithPipeline(p), httpclient.Base(counting))}
	body := bytes.Repeat([]byte("x"), 8<<20)
	var classes []string
	for i := 0; i < 6; i++ {
		req, _ := http.NewRequest(http.MethodPut, ts.URL+"/objects/"+fmt.Sprint(i), bytes.NewReader(body))
		resp, err := hc.Do(req)
		if err == nil {
			resp.Body.Close()
			classes = append(classes, resp.Status)
			continue
		}
		if i == 0 {
			t.Logf("%v", err)
		}
		classes = append(classes, resilience.Classify(err).String())
	}
	t.Logf("PUTs over %v: %v, attempts %d", proto.Load(), classes, counting.n.Load())
	require.NotContains(t, classes, resilience.ClassRejected.String())
}

// A healthy HTTPS server that closes a keep-alive connection (its idle
// timeout, a graceful restart, a max-requests-per-connection limit) just as
// the client starts its next request on it: the close crosses the upload on
// the wire and the server's kernel resets the rest. It is a race every
// keep-alive client meets; net/http does not retry it itself once some of
// the body is written. The next connection is served normally.
func TestReview20KeepAliveCloseRaceIdempotentPOSTIsRetried(t *testing.T) {
	ts := httptest.NewUnstartedServer(http.NotFoundHandler())
	ts.StartTLS()
	t.Cleanup(ts.Close)
	cfg := &tls.Config{Certificates: ts.TLS.Certificates}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })
	var conns, served atomic.Int32
	go func() {
		for {
			raw, err := l.Accept()
			if err != nil {
				return
			}
			first := conns.Add(1) == 1
			go func() {
				defer raw.Close()
				c := tls.Server(raw, cfg)
				br := bufio.NewReader(c)
				for n := 1; ; n++ {
					if first && n == 2 {
						// The idle close meets the request: the server
						// reads what arrived and is gone.
						_, _ = br.Peek(1)
						raw.(*net.TCPConn).SetLinger(0)
						return
					}
					req, err := http.ReadRequest(br)
					if err != nil {
						return
					}
					m, _ := io.Copy(io.Discard, req.Body)
					served.Add(1)
					msg := fmt.Sprintf("got %d", m)
					fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s", len(msg), msg)
				}
			}()
		}
	}()
	base := ts.Client().Transport.(*http.Transport).Clone()
	t.Cleanup(base.CloseIdleConnections)
	counting := &zzCounting{rt: base, t: t}
	hc := &http.Client{Transport: httpclient.NewTransport(httpclient.Base(counting))}
	url := "https://" + l.Addr().String() + "/payments"

	warm, err := hc.Get(url) // the connection that will be reused
	require.NoError(t, err)
	io.Copy(io.Discard, warm.Body)
	warm.Body.Close()

	body := bytes.Repeat([]byte("x"), 8<<20) // a batch upload
	req, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	req.Header.Set("Idempotency-Key", "batch-42")
	resp, err := hc.Do(req)
	if err != nil {
		t.Logf("class %v after %d attempt(s)", resilience.Classify(err), counting.n.Load()-1)
	}
	require.NoError(t, err, "a healthy server: a retry on a new connection completes the call")
	resp.Body.Close()
	require.EqualValues(t, 2, served.Load())
}
