package httpclient_test

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/resiliencekit/resiliencekit/httpclient"
)

// r113HalfCloseBackend switches to a protocol that reads until the client
// half-closes, then answers what it read (as a hijacked exec/attach stream
// does: docker, kubectl).
func r113HalfCloseBackend(t *testing.T) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Upgrade") != "echo" {
			http.Error(w, "upgrade required", 426)
			return
		}
		conn, brw, err := w.(http.Hijacker).Hijack()
		if err != nil {
			return
		}
		defer conn.Close()
		brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: echo\r\nConnection: Upgrade\r\n\r\n")
		brw.Flush()
		conn.SetDeadline(time.Now().Add(3 * time.Second))
		got, _ := io.ReadAll(brw) // until the client's half-close
		conn.Write([]byte("got:" + string(got)))
	}))
	t.Cleanup(srv.Close)
	return srv
}

func r113UpgradeReq(u string) *http.Request {
	req, _ := http.NewRequest(http.MethodGet, u, nil)
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", "echo")
	return req
}

// The 101's body of net/http has CloseWrite (a half-close of the
// upgraded connection); the Transport's must keep it.
func TestReview113_UpgradeKeepsCloseWrite(t *testing.T) {
	srv := r113HalfCloseBackend(t)
	for _, name := range []string{"plain", "httpclient"} {
		t.Run(name, func(t *testing.T) {
			var rt http.RoundTripper = &http.Transport{}
			if name == "httpclient" {
				rt = httpclient.NewTransport(httpclient.WithPipeline(r113Pipeline(nil)), httpclient.Base(rt))
			}
			resp, err := rt.RoundTrip(r113UpgradeReq(srv.URL))
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			if resp.StatusCode != 101 {
				t.Fatalf("status %d", resp.StatusCode)
			}
			rw, ok := resp.Body.(io.ReadWriteCloser)
			if !ok {
				t.Fatalf("%s: 101 body %T is not an io.ReadWriteCloser", name, resp.Body)
			}
			rw.Write([]byte("hello"))
			cw, ok := resp.Body.(interface{ CloseWrite() error })
			if !ok {
				t.Fatalf("%s: 101 body %T has no CloseWrite: the upgraded stream cannot be half-closed, which net/http's can", name, resp.Body)
			}
			if err := cw.CloseWrite(); err != nil {
				t.Fatal(err)
			}
			got, _ := io.ReadAll(rw)
			if string(got) != "got:hello" {
				t.Fatalf("%s: got %q", name, got)
			}
		})
	}
}

// httputil.ReverseProxy over the Transport: a client that half-closes
// its upgraded connection gets the backend's answer through a proxy on
// net/http's transport; through one on the Transport too?
func TestReview113_ReverseProxyUpgradeHalfClose(t *testing.T) {
	backend := r113HalfCloseBackend(t)
	bu, _ := url.Parse(backend.URL)
	for _, name := range []string{"plain", "httpclient"} {
		t.Run(name, func(t *testing.T) {
			var rt http.RoundTripper = &http.Transport{}
			if name == "httpclient" {
				rt = httpclient.NewTransport(httpclient.WithPipeline(r113Pipeline(nil)), httpclient.Base(rt))
			}
			proxy := httputil.NewSingleHostReverseProxy(bu)
			proxy.Transport = rt
			front := httptest.NewServer(proxy)
			defer front.Close()
			conn, err := net.Dial("tcp", strings.TrimPrefix(front.URL, "http://"))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			conn.SetDeadline(time.Now().Add(3 * time.Second))
			conn.Write([]byte("GET / HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n"))
			br := bufio.NewReader(conn)
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != 101 {
				t.Fatalf("status %d", resp.StatusCode)
			}
			conn.Write([]byte("hello"))
			conn.(*net.TCPConn).CloseWrite()
			got, _ := io.ReadAll(br)
			if string(got) != "got:hello" {
				t.Fatalf("%s: through the proxy the client got %q, want %q", name, got, "got:hello")
			}
		})
	}
}
