package httpclient_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/httpclient"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/resilience"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

// envNginx names the nginx binary that .ci/run installs; without it, and
// with none at /usr/sbin/nginx or on the PATH, the nginx tests skip.
const envNginx = "RESILIENCEKIT_NGINX"

// startNginx runs a real nginx of its own (no daemon, its files in a
// temporary directory) with the server block given, in which %s is its
// port, and returns its address; it is stopped with the test.
func startNginx(t *testing.T, server string) string {
	t.Helper()
	bin := os.Getenv(envNginx)
	if bin == "" {
		if bin, _ = exec.LookPath("nginx"); bin == "" {
			if _, err := os.Stat("/usr/sbin/nginx"); err == nil {
				bin = "/usr/sbin/nginx"
			}
		}
	}
	if bin == "" {
		t.Skipf("no nginx (%s, PATH or /usr/sbin/nginx): .ci/run installs it", envNginx)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o777); err != nil { // the workers', which run as nobody under root
		t.Fatal(err)
	}
	user := ""
	if os.Geteuid() == 0 {
		user = "user root;"
	}
	conf := fmt.Sprintf(`%s
master_process off;
pid %[2]s/nginx.pid;
error_log %[2]s/error.log warn;
events { worker_connections 256; }
http {
	access_log off;
	client_body_temp_path %[2]s/body;
	proxy_temp_path %[2]s/proxy;
	fastcgi_temp_path %[2]s/fastcgi;
	uwsgi_temp_path %[2]s/uwsgi;
	scgi_temp_path %[2]s/scgi;
	server {
		listen 127.0.0.1:%[3]d;
		%[4]s
	}
}
`, user, dir, port, server)
	path := filepath.Join(dir, "nginx.conf")
	if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := os.Create(filepath.Join(dir, "out.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	// One process (master_process off): killing it stops nginx whole.
	cmd := exec.Command(bin, "-p", dir, "-c", path, "-g", "daemon off;")
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			o, _ := os.ReadFile(filepath.Join(dir, "out.log"))
			e, _ := os.ReadFile(filepath.Join(dir, "error.log"))
			t.Logf("nginx: %s\nerror.log:\n%s", o, e)
		}
	})
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	for deadline := time.Now().Add(10 * time.Second); ; {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
			return addr
		}
		if time.Now().After(deadline) {
			t.Fatalf("nginx does not listen on %s: %v", addr, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// nginxClient is a client whose breaker opens on the first failure it
// counts, with the default retry policy, over a transport of its own; sent
// counts the attempts it sends.
func nginxClient(t *testing.T, opts ...breaker.Option) (hc *http.Client, b *breaker.Breaker, sent *atomic.Int64) {
	return clientOver(t, &http.Transport{}, opts...)
}

// clientOver is nginxClient over base.
func clientOver(t *testing.T, base *http.Transport, opts ...breaker.Option) (hc *http.Client, b *breaker.Breaker, sent *atomic.Int64) {
	b = breaker.New("nginx", append([]breaker.Option{breaker.ConsecutiveFailures(1)}, opts...)...)
	t.Cleanup(base.CloseIdleConnections)
	sent = new(atomic.Int64)
	counted := r2rt(func(r *http.Request) (*http.Response, error) {
		sent.Add(1)
		return base.RoundTrip(r)
	})
	tr := httpclient.NewTransport(httpclient.Base(counted), httpclient.WithPipeline(pipeline.New(
		pipeline.WithBreaker(b), pipeline.WithRetry(retrypolicy.New(retrypolicy.BaseDelay(time.Millisecond))))))
	return &http.Client{Transport: tr}, b, sent
}

// chunked hides a reader's length, so that net/http sends it chunked.
type chunked struct{ io.Reader }

// TestNginxRefusingTheCallersRequestDoesNotOpenTheBreaker sends, through a
// real nginx in front of a healthy backend, requests that nginx refuses
// as the caller's doing: a body over client_max_body_size, with its
// length and chunked, headers over large_client_header_buffers, a URI
// over them; with lingering_close on and off (off, nginx answers 413 to
// a chunked body, or 400 to the headers, and resets the connection as
// the client still writes, and the client's socket drops the answer:
// net/http returns "connection reset by peer"). With a breaker that
// opens on one failure, none opens it, and the healthy call after each
// succeeds. Each may meet the reset as the client writes or reads, and
// its retry gets nginx's answer: the chunked body too, whose first
// attempt was cut before more than could be kept for a retry was read (if
// more was, it is sent once, and the reset is the server refusing it).
func TestNginxRefusingTheCallersRequestDoesNotOpenTheBreaker(t *testing.T) {
	var hits atomic.Int64
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		_, _ = io.Copy(io.Discard, r.Body)
		_, _ = io.WriteString(w, "ok")
	}))
	t.Cleanup(backend.Close)
	big := make([]byte, 4<<20)
	for _, lingering := range []string{"on", "off"} {
		addr := startNginx(t, `client_max_body_size 1k; lingering_close `+lingering+`; large_client_header_buffers 2 1k;
		location / { proxy_pass `+backend.URL+`; }`)
		url := "http://" + addr + "/"
		for _, tc := range []struct {
			name string
			once bool // sent once: its body is too long to keep for a retry
			req  func() *http.Request
		}{
			{"body over the limit", false, func() *http.Request {
				r, _ := http.NewRequest(http.MethodPut, url, bytes.NewReader(big))
				return r
			}},
			{"chunked body over the limit", false, func() *http.Request {
				r, _ := http.NewRequest(http.MethodPut, url, chunked{bytes.NewReader(big)})
				return r
			}},
			{"header over the limit", false, func() *http.Request {
				r, _ := http.NewRequest(http.MethodGet, url, nil)
				r.Header.Set("X-Big", strings.Repeat("a", 8<<10))
				return r
			}},
			{"URI over the limit", false, func() *http.Request {
				r, _ := http.NewRequest(http.MethodGet, url+strings.Repeat("a", 8<<10), nil)
				return r
			}},
		} {
			t.Run("lingering_close "+lingering+"/"+tc.name, func(t *testing.T) {
				for i := range 6 { // a reset comes in about half the chunked rounds
					hc, b, sent := nginxClient(t)
					before := hits.Load()
					resp, err := hc.Do(tc.req())
					if err == nil {
						assert.GreaterOrEqual(t, resp.StatusCode, 400, "round %d", i)
						resp.Body.Close()
					} else {
						assert.ErrorIs(t, err, syscall.ECONNRESET, "round %d: only a reset is expected", i)
					}
					if tc.once {
						assert.EqualValues(t, 1, sent.Load(), "round %d: sent once", i)
					} else { // a reset met as the client reads is retried, and the retry gets nginx's answer
						assert.LessOrEqual(t, sent.Load(), int64(4), "round %d", i)
					}
					assert.Equal(t, before, hits.Load(), "round %d: nginx refused it: the backend saw nothing", i)
					assert.Equal(t, resilience.StateClosed, b.State(), "round %d: %v", i, err)
					ok, err := hc.Get(url)
					require.NoError(t, err, "round %d: a healthy call after the caller's own refused one", i)
					ok.Body.Close()
					assert.Equal(t, http.StatusOK, ok.StatusCode)
				}
			})
		}
	}
}

// TestNginxDependencyFailuresCountAndRecover is the other side, through
// the same real nginx: a backend that drops every connection (nginx
// answers 502) or is too slow for proxy_read_timeout (504) is the
// dependency failing: retried and counted, so the breaker, which opens on
// one call that failed, opens; once the
// backend is back, a probe closes it and calls succeed again.
func TestNginxDependencyFailuresCountAndRecover(t *testing.T) {
	var slow atomic.Bool
	backend := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if slow.Load() {
			select {
			case <-r.Context().Done():
			case <-time.After(2 * time.Second):
			}
			return
		}
		_, _ = io.WriteString(w, "ok")
	}))
	l := &droppingListener{Listener: backend.Listener}
	backend.Listener = l
	backend.Start()
	t.Cleanup(backend.Close)
	addr := startNginx(t, `location / { proxy_pass `+backend.URL+`; proxy_read_timeout 100ms; }`)
	url := "http://" + addr + "/"

	for _, tc := range []struct {
		name   string
		status int
		fault  func(bool)
	}{
		{"backend drops connections", http.StatusBadGateway, l.down.Store},
		{"backend too slow", http.StatusGatewayTimeout, slow.Store},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hc, b, sent := nginxClient(t, breaker.OpenTimeout(50*time.Millisecond))
			tc.fault(true)
			resp, err := hc.Get(url) // the last answer, handed back as it came
			require.NoError(t, err)
			resp.Body.Close()
			assert.Equal(t, tc.status, resp.StatusCode)
			assert.Equal(t, resilience.StateOpen, b.State())
			assert.EqualValues(t, 4, sent.Load(), "retried: the default policy's 4 attempts")

			tc.fault(false)
			require.Eventually(t, func() bool {
				resp, err := hc.Get(url)
				if err != nil {
					return false
				}
				resp.Body.Close()
				return resp.StatusCode == http.StatusOK
			}, 5*time.Second, 10*time.Millisecond, "back once the backend is")
			assert.Equal(t, resilience.StateClosed, b.State())
		})
	}
}

// droppingListener closes the connections it accepts while down.
type droppingListener struct {
	net.Listener
	down atomic.Bool
}

func (l *droppingListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil || !l.down.Load() {
			return c, err
		}
		c.Close()
	}
}

// TestAServerThatResetsEveryConnectionCounts: a server that resets each
// connection as it accepts it cuts a GET before net/http wrote any of it
// (here, a dialer slow to hand over the connection lets the reset come
// first): the dependency failing, retried and counted, not a request cut
// for its size.
func TestAServerThatResetsEveryConnectionCounts(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			_ = c.(*net.TCPConn).SetLinger(0) // a reset, not a FIN
			c.Close()
		}
	}()
	var d net.Dialer
	slow := &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := d.DialContext(ctx, network, addr)
		time.Sleep(20 * time.Millisecond)
		return c, err
	}}
	for range 3 {
		hc, b, sent := clientOver(t, slow)
		_, err := hc.Get("http://" + l.Addr().String() + "/")
		require.Error(t, err)
		// The reset, a closed pipe, or net/http's own close of the
		// connection it saw reset.
		assert.True(t, errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) || errors.Is(err, net.ErrClosed), "%v", err)
		assert.EqualValues(t, 4, sent.Load(), "retried: %v", err)
		assert.Equal(t, resilience.StateOpen, b.State(), "counted: %v", err)
	}
}
