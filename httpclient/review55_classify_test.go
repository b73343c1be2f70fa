package httpclient

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/resilience"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

type review55Count struct {
	base http.RoundTripper
	n    atomic.Int32
}

func (c *review55Count) RoundTrip(r *http.Request) (*http.Response, error) {
	c.n.Add(1)
	return c.base.RoundTrip(r)
}

type review55Result struct {
	class    resilience.Class
	counted  uint32
	attempts int32
	err      error
}

func review55Run(t *testing.T, base http.RoundTripper, req func(ctx context.Context) *http.Request) review55Result {
	t.Helper()
	b := breaker.New("r55", breaker.ConsecutiveFailures(1))
	p := pipeline.New(pipeline.WithBreaker(b), pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(3), retrypolicy.BaseDelay(time.Millisecond), retrypolicy.MaxDelay(2*time.Millisecond))))
	cb := &review55Count{base: base}
	tr := NewTransport(WithPipeline(p), Base(cb))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r := req(ctx)
	resp, err := tr.do(r)
	if resp != nil {
		resp.Body.Close()
	}
	var counted uint32
	if b.State() != resilience.StateClosed {
		counted = 1
	}
	return review55Result{resilience.Classify(err), counted, cb.n.Load(), err}
}

func review55Get(u string) func(ctx context.Context) *http.Request {
	return func(ctx context.Context) *http.Request {
		r, _ := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
		return r
	}
}

func review55Closed(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	a := l.Addr().String()
	l.Close()
	return a
}

func review55Log(t *testing.T, name string, r review55Result) {
	t.Logf("%-32s class=%-9v breakerOpened=%d attempts=%d err=%v", name, r.class, r.counted, r.attempts, r.err)
}

// TestReview55_Table records the class, breaker count and attempts of real failures.
func TestReview55_Table(t *testing.T) {
	plain := func() http.RoundTripper { return http.DefaultTransport.(*http.Transport).Clone() }

	t.Run("closed port", func(t *testing.T) {
		r := review55Run(t, plain(), review55Get("http://"+review55Closed(t)+"/"))
		review55Log(t, "closed port", r)
		if r.class != resilience.ClassTransient || r.counted == 0 {
			t.Errorf("want transient+counted")
		}
	})

	t.Run("reset on accept", func(t *testing.T) {
		l, _ := net.Listen("tcp", "127.0.0.1:0")
		defer l.Close()
		go func() {
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				c.(*net.TCPConn).SetLinger(0)
				c.Close()
			}
		}()
		r := review55Run(t, plain(), review55Get("http://"+l.Addr().String()+"/"))
		review55Log(t, "reset on accept", r)
		if r.class != resilience.ClassTransient || r.counted == 0 {
			t.Errorf("want transient+counted")
		}
	})

	t.Run("reset after request", func(t *testing.T) {
		l, _ := net.Listen("tcp", "127.0.0.1:0")
		defer l.Close()
		go func() {
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				go func() {
					buf := make([]byte, 4096)
					c.Read(buf)
					c.(*net.TCPConn).SetLinger(0)
					c.Close()
				}()
			}
		}()
		r := review55Run(t, plain(), review55Get("http://"+l.Addr().String()+"/"))
		review55Log(t, "reset after request", r)
		if r.class != resilience.ClassTransient || r.counted == 0 {
			t.Errorf("want transient+counted")
		}
	})

	t.Run("self-signed TLS", func(t *testing.T) {
		srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
		defer srv.Close()
		r := review55Run(t, plain(), review55Get(srv.URL))
		review55Log(t, "self-signed TLS", r)
		if r.class != resilience.ClassRejected || r.counted != 0 || r.attempts != 1 {
			t.Errorf("want rejected, not counted, 1 attempt")
		}
	})

	t.Run("caller tls config Min>Max", func(t *testing.T) {
		srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
		defer srv.Close()
		tr := srv.Client().Transport.(*http.Transport).Clone()
		tr.TLSClientConfig.MinVersion = tls.VersionTLS13
		tr.TLSClientConfig.MaxVersion = tls.VersionTLS12
		r := review55Run(t, tr, review55Get(srv.URL))
		review55Log(t, "caller tls config Min>Max", r)
		if r.class.Failure() || r.attempts > 1 {
			t.Errorf("caller's TLS config error: counted=%d attempts=%d class=%v", r.counted, r.attempts, r.class)
		}
	})

	t.Run("caller tls client cert bad (GetClientCertificate errs)", func(t *testing.T) {
		srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
		srv.TLS = &tls.Config{ClientAuth: tls.RequestClientCert}
		srv.StartTLS()
		defer srv.Close()
		tr := srv.Client().Transport.(*http.Transport).Clone()
		tr.TLSClientConfig.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			return nil, errors.New("caller: cannot load client key")
		}
		r := review55Run(t, tr, review55Get(srv.URL))
		review55Log(t, "caller client-cert load error", r)
		if r.counted == 0 { // the callback's error comes as it came: nothing tells it from the dependency's (the package doc)
			t.Errorf("caller's client-certificate error: counted=%d attempts=%d class=%v", r.counted, r.attempts, r.class)
		}
	})

	t.Run("tls server name mismatch", func(t *testing.T) {
		srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
		defer srv.Close()
		tr := srv.Client().Transport.(*http.Transport).Clone()
		tr.TLSClientConfig.ServerName = "wrong.example"
		r := review55Run(t, tr, review55Get(srv.URL))
		review55Log(t, "tls server name mismatch", r)
		if r.class != resilience.ClassRejected || r.counted != 0 || r.attempts != 1 {
			t.Errorf("want rejected, not counted, 1 attempt")
		}
	})

	t.Run("proxy down", func(t *testing.T) {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
		defer srv.Close()
		tr := plain().(*http.Transport)
		pu, _ := url.Parse("http://" + review55Closed(t))
		tr.Proxy = http.ProxyURL(pu)
		r := review55Run(t, tr, review55Get("http://dependency.example:8080/"))
		review55Log(t, "proxy down", r)
		if r.counted == 0 || r.attempts != 3 { // the path to the dependency counts as the dependency (the package doc)
			t.Errorf("a proxy that refuses: %d failures, %d attempts", r.counted, r.attempts)
		}
	})

	t.Run("unsupported scheme", func(t *testing.T) {
		r := review55Run(t, plain(), review55Get("gopher://127.0.0.1/"))
		review55Log(t, "unsupported scheme", r)
		if r.class != resilience.ClassRejected || r.counted != 0 {
			t.Errorf("want rejected")
		}
	})

	t.Run("invalid port in URL", func(t *testing.T) {
		r := review55Run(t, plain(), func(ctx context.Context) *http.Request {
			r, _ := http.NewRequestWithContext(ctx, "GET", "http://127.0.0.1/", nil)
			r.URL.Host = "127.0.0.1:99999"
			return r
		})
		review55Log(t, "port 99999", r)
		if r.class.Failure() || r.attempts > 1 {
			t.Errorf("caller's invalid port counted=%d attempts=%d class=%v", r.counted, r.attempts, r.class)
		}
	})

	t.Run("invalid header h1", func(t *testing.T) {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
		defer srv.Close()
		r := review55Run(t, plain(), func(ctx context.Context) *http.Request {
			r, _ := http.NewRequestWithContext(ctx, "GET", srv.URL, nil)
			r.Header["X-Bad"] = []string{"a\nb"}
			return r
		})
		review55Log(t, "invalid header h1", r)
		if r.class != resilience.ClassRejected || r.counted != 0 {
			t.Errorf("want rejected")
		}
	})

	h2srv := func() *httptest.Server {
		srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.ProtoMajor != 2 {
				w.WriteHeader(418)
			}
		}))
		srv.EnableHTTP2 = true
		srv.StartTLS()
		return srv
	}

	t.Run("invalid header value h2", func(t *testing.T) {
		srv := h2srv()
		defer srv.Close()
		r := review55Run(t, srv.Client().Transport, func(ctx context.Context) *http.Request {
			r, _ := http.NewRequestWithContext(ctx, "GET", srv.URL, nil)
			r.Header["X-Bad"] = []string{"a\nb"}
			return r
		})
		review55Log(t, "invalid header value h2", r)
		if r.class.Failure() || r.attempts > 1 {
			t.Errorf("caller's invalid header over HTTP/2 counted=%d attempts=%d class=%v", r.counted, r.attempts, r.class)
		}
	})

	t.Run("invalid header name h2", func(t *testing.T) {
		srv := h2srv()
		defer srv.Close()
		r := review55Run(t, srv.Client().Transport, func(ctx context.Context) *http.Request {
			r, _ := http.NewRequestWithContext(ctx, "GET", srv.URL, nil)
			r.Header["X Bad"] = []string{"v"}
			return r
		})
		review55Log(t, "invalid header name h2", r)
		if r.class.Failure() || r.attempts > 1 {
			t.Errorf("caller's invalid header name over HTTP/2 counted=%d attempts=%d class=%v", r.counted, r.attempts, r.class)
		}
	})

	t.Run("invalid method h2", func(t *testing.T) {
		srv := h2srv()
		defer srv.Close()
		r := review55Run(t, srv.Client().Transport, func(ctx context.Context) *http.Request {
			r, _ := http.NewRequestWithContext(ctx, "GET", srv.URL, nil)
			r.Method = "GE T"
			return r
		})
		review55Log(t, "invalid method h2", r)
		if r.class.Failure() || r.attempts > 1 {
			t.Errorf("caller's invalid method over HTTP/2 counted=%d attempts=%d class=%v", r.counted, r.attempts, r.class)
		}
	})

	t.Run("response header too big h1", func(t *testing.T) {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("X-Big", strings.Repeat("a", 4096))
		}))
		defer srv.Close()
		tr := plain().(*http.Transport)
		tr.MaxResponseHeaderBytes = 1024
		r := review55Run(t, tr, review55Get(srv.URL))
		review55Log(t, "resp header too big h1", r)
		if r.class != resilience.ClassRejected || r.counted != 0 {
			t.Errorf("want rejected")
		}
	})

	t.Run("body read fails (once, no GetBody)", func(t *testing.T) {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.Copy(io.Discard, r.Body) }))
		defer srv.Close()
		r := review55Run(t, plain(), func(ctx context.Context) *http.Request {
			r, _ := http.NewRequestWithContext(ctx, "POST", srv.URL, io.MultiReader(strings.NewReader("abc"), iotestErr{}))
			return r
		})
		review55Log(t, "body read fails POST", r)
		if r.class != resilience.ClassRejected || r.counted != 0 {
			t.Errorf("want rejected")
		}
	})

	t.Run("GetBody body read fails", func(t *testing.T) {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.Copy(io.Discard, r.Body) }))
		defer srv.Close()
		r := review55Run(t, plain(), func(ctx context.Context) *http.Request {
			r, _ := http.NewRequestWithContext(ctx, "PUT", srv.URL, nil)
			mk := func() (io.ReadCloser, error) {
				return io.NopCloser(io.MultiReader(strings.NewReader("abc"), iotestErr{})), nil
			}
			r.Body, _ = mk()
			r.GetBody = mk
			r.ContentLength = 10
			return r
		})
		review55Log(t, "GetBody read fails PUT", r)
		if r.class != resilience.ClassRejected || r.counted != 0 {
			t.Errorf("want rejected")
		}
	})

	t.Run("cancel with cause", func(t *testing.T) {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() }))
		defer srv.Close()
		var cancel context.CancelCauseFunc
		r := review55Run(t, plain(), func(ctx context.Context) *http.Request {
			var c context.Context
			c, cancel = context.WithCancelCause(ctx)
			time.AfterFunc(50*time.Millisecond, func() { cancel(errors.New("user went away")) })
			r, _ := http.NewRequestWithContext(c, "GET", srv.URL, nil)
			return r
		})
		review55Log(t, "cancel with cause", r)
		if r.counted != 0 || r.attempts != 1 {
			t.Errorf("caller's cancel counted=%d attempts=%d", r.counted, r.attempts)
		}
	})

	t.Run("500 and 503 and 429", func(t *testing.T) {
		for _, st := range []int{500, 503, 429, 400} {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(st) }))
			r := review55Run(t, plain(), review55Get(srv.URL))
			srv.Close()
			review55Log(t, fmt.Sprint("status ", st), r)
		}
	})

	t.Run("h2 GOAWAY", func(t *testing.T) {
		for _, code := range []uint32{1, 11} {
			srv := h2srv()
			cfg := &tls.Config{Certificates: srv.TLS.Certificates, NextProtos: []string{"h2"}}
			l, err := tls.Listen("tcp", "127.0.0.1:0", cfg)
			if err != nil {
				t.Fatal(err)
			}
			go func() {
				for {
					c, err := l.Accept()
					if err != nil {
						return
					}
					go func() {
						defer c.Close()
						c.Write([]byte{0, 0, 0, 4, 0, 0, 0, 0, 0}) // SETTINGS
						buf := make([]byte, 4096)
						c.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
						c.Read(buf) // preface + settings + headers, roughly
						ga := []byte{0, 0, 8, 7, 0, 0, 0, 0, 0, 0, 0, 0, 0, byte(code >> 24), byte(code >> 16), byte(code >> 8), byte(code)}
						c.Write(ga)
						time.Sleep(20 * time.Millisecond)
					}()
				}
			}()
			tr := srv.Client().Transport.(*http.Transport).Clone()
			r := review55Run(t, tr, review55Get("https://"+l.Addr().String()+"/"))
			review55Log(t, fmt.Sprint("h2 GOAWAY code ", code), r)
			l.Close()
			srv.Close()
		}
	})
}

type iotestErr struct{}

func (iotestErr) Read([]byte) (int, error) { return 0, errors.New("caller's reader broke") }
