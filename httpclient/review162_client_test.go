package httpclient_test

// review162: attacks on Client's redirect and decode errors.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/resiliencekit/resiliencekit/httpclient"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/resilience"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
	"github.com/resiliencekit/resiliencekit/retrysignal"
)

func r162Client(opts ...httpclient.Option) *httpclient.Client {
	p := pipeline.New(pipeline.WithRetry(retrypolicy.New(retrypolicy.BaseDelay(time.Millisecond), retrypolicy.MaxDelay(2*time.Millisecond))))
	return httpclient.New(append([]httpclient.Option{httpclient.WithPipeline(p)}, opts...)...)
}

// r162Redirecting answers 302 to loc on /, 200 {} elsewhere, counting hits.
func r162Redirecting(t *testing.T, loc string, hits *atomic.Int64) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		if r.URL.Path == "/" {
			w.Header()["Location"] = []string{loc}
			w.WriteHeader(http.StatusFound)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{}`)
	}))
	t.Cleanup(srv.Close)
	return srv
}

// A Location from the dependency that cannot be followed is its bad
// answer: terminal, 502, sent once, and the message names no query or
// password of the Location (StatusError's URL has none; the Client's
// messages are url-free).
func TestReview162BadLocation(t *testing.T) {
	for _, loc := range []string{
		"http://[::1/x?token=SECRET",            // does not parse
		"http://user:SECRET@[::1/x",             // does not parse, with a password
		"ftp://example.com/x?token=SECRET",      // a scheme the Transport cannot send to
		"http:///x?token=SECRET",                // no host
		"http://127.0.0.1:99999/x?token=SECRET", // invalid port
	} {
		t.Run(loc, func(t *testing.T) {
			var hits atomic.Int64
			srv := r162Redirecting(t, loc, &hits)
			var out map[string]any
			err := r162Client().GetJSON(context.Background(), srv.URL+"/", &out)
			if err == nil {
				t.Fatal("no error")
			}
			if c := resilience.Classify(err); c != resilience.ClassTerminal {
				t.Errorf("class %v, want terminal: %v", c, err)
			}
			if s := retrysignal.Status(err); s != http.StatusBadGateway {
				t.Errorf("status %d, want 502: %v", s, err)
			}
			if n := hits.Load(); n != 1 {
				t.Errorf("the dependency was asked %d times, want 1", n)
			}
			if strings.Contains(err.Error(), "SECRET") {
				t.Errorf("message repeats the Location's secret: %q", err.Error())
			}
		})
	}
}

// The caller's own URL that cannot be sent to is its own fault: not
// terminal, not 502, and no signal.
func TestReview162OwnBadURLIsNotBadRedirect(t *testing.T) {
	for _, u := range []string{"ftp://example.com/x", "http:///x", "http://127.0.0.1:99999/x"} {
		err := r162Client().GetJSON(context.Background(), u, new(map[string]any))
		if err == nil {
			t.Fatalf("%s: no error", u)
		}
		c := resilience.Classify(err)
		if c == resilience.ClassTerminal || retrysignal.Status(err) == http.StatusBadGateway {
			t.Errorf("%s: the caller's own URL taken for the dependency's bad answer: class %v status %d: %v", u, c, retrysignal.Status(err), err)
		}
		if retrysignal.Retried(err) {
			t.Errorf("%s: no-retry signal for the caller's own fault: %v", u, err)
		}
	}
}

// A CheckRedirect policy that refuses with the caller's context's error
// leaves it as it is; one that refuses with its own error is a 3xx not
// followed, of class permanent, with its StatusError; the dependency is
// asked once (per hop) and never again.
func TestReview162CheckRedirectErrors(t *testing.T) {
	var hits atomic.Int64
	srv := r162Redirecting(t, "/next?token=SECRET", &hits)
	mine := errors.New("review162: policy says no")
	ctx, cancel := context.WithCancel(context.Background())
	c := r162Client(httpclient.CheckRedirect(func(req *http.Request, via []*http.Request) error {
		cancel()
		return req.Context().Err()
	}))
	err := c.GetJSON(ctx, srv.URL+"/", new(map[string]any))
	if !errors.Is(err, context.Canceled) {
		t.Errorf("policy's context error lost: %v", err)
	}
	if cl := resilience.Classify(err); cl != resilience.ClassCanceled {
		t.Errorf("class %v, want canceled", cl)
	}
	var se *httpclient.StatusError
	if errors.As(err, &se) {
		t.Errorf("caller's end given a StatusError %d", se.StatusCode)
	}

	hits.Store(0)
	c = r162Client(httpclient.CheckRedirect(func(*http.Request, []*http.Request) error { return mine }))
	err = c.GetJSON(context.Background(), srv.URL+"/", new(map[string]any))
	if !errors.Is(err, mine) {
		t.Errorf("policy's error lost: %v", err)
	}
	if !errors.As(err, &se) || se.StatusCode != http.StatusFound {
		t.Errorf("no StatusError 302: %v", err)
	}
	if cl := resilience.Classify(err); cl != resilience.ClassPermanent {
		t.Errorf("class %v, want permanent", cl)
	}
	if n := hits.Load(); n != 1 {
		t.Errorf("asked %d times, want 1", n)
	}
	if strings.Contains(err.Error(), "SECRET") {
		t.Errorf("message has the query: %q", err.Error())
	}

	// The deadline, as a policy's error.
	hits.Store(0)
	dctx, dcancel := context.WithTimeout(context.Background(), time.Second)
	defer dcancel()
	c = r162Client(httpclient.CheckRedirect(func(*http.Request, []*http.Request) error { return context.DeadlineExceeded }))
	err = c.GetJSON(dctx, srv.URL+"/", new(map[string]any))
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("deadline lost: %v", err)
	}
}

// A redirect loop: the 11th stops, permanent, the dependency asked 11
// times and not a 12th (no retry at any layer).
func TestReview162RedirectLoopOnce(t *testing.T) {
	var hits atomic.Int64
	srv := r162Redirecting(t, "/", &hits)
	err := r162Client().GetJSON(context.Background(), srv.URL+"/", new(map[string]any))
	var se *httpclient.StatusError
	if !errors.As(err, &se) || se.StatusCode != http.StatusFound {
		t.Fatalf("no StatusError 302: %v", err)
	}
	if cl := resilience.Classify(err); cl != resilience.ClassPermanent {
		t.Errorf("class %v, want permanent", cl)
	}
	if n := hits.Load(); n != 10 && n != 11 {
		t.Errorf("asked %d times, want 10 or 11", n)
	}
}

func r162Serving(t *testing.T, h http.HandlerFunc, hits *atomic.Int64) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		h(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv
}

type r162Out struct {
	A int `json:"a"`
}

// A 2xx whose body is read whole and is not JSON, not of the type, or
// empty: terminal, 502, asked once.
func TestReview162DecodeTerminal(t *testing.T) {
	for _, body := range []string{"not json", `{"a":"x"}`, "", `{"a":1`, "[1,2]", `{"a":1} trailing`} {
		t.Run(fmt.Sprintf("%q", body), func(t *testing.T) {
			var hits atomic.Int64
			srv := r162Serving(t, func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				_, _ = io.WriteString(w, body)
			}, &hits)
			var out r162Out
			err := r162Client().GetJSON(context.Background(), srv.URL, &out)
			if body == `{"a":1} trailing` { // Decode reads one value: fine
				return
			}
			if err == nil {
				t.Fatal("no error")
			}
			if cl := resilience.Classify(err); cl != resilience.ClassTerminal {
				t.Errorf("class %v, want terminal: %v", cl, err)
			}
			if s := retrysignal.Status(err); s != http.StatusBadGateway {
				t.Errorf("status %d, want 502", s)
			}
			if n := hits.Load(); n != 1 {
				t.Errorf("asked %d times", n)
			}
		})
	}
}

// The caller's out that is no pointer (or a nil one): rejected, the
// caller's, no 502, no signal, nothing counted against the dependency.
func TestReview162DecodeCallersOut(t *testing.T) {
	var hits atomic.Int64
	srv := r162Serving(t, func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, `{"a":1}`)
	}, &hits)
	var nilp *r162Out
	for _, out := range []any{r162Out{}, nilp, 3} {
		hits.Store(0)
		err := r162Client().GetJSON(context.Background(), srv.URL, out)
		if err == nil {
			t.Fatalf("%T: no error", out)
		}
		if cl := resilience.Classify(err); cl != resilience.ClassRejected {
			t.Errorf("%T: class %v, want rejected: %v", out, cl, err)
		}
		if s := retrysignal.Status(err); s == http.StatusBadGateway {
			t.Errorf("%T: status 502 for the caller's fault", out)
		}
		if retrysignal.Retried(err) {
			t.Errorf("%T: no-retry signal for the caller's fault", out)
		}
		if n := hits.Load(); n != 1 {
			t.Errorf("%T: asked %d times", out, n)
		}
	}
}

// A read that fails keeps its error: a body cut short is no terminal
// answer (a retry may get it whole); the caller's deadline in the middle
// of the body is still found by errors.Is.
func TestReview162DecodeReadFails(t *testing.T) {
	var hits atomic.Int64
	srv := r162Serving(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/stall" {
			w.Header().Set("Content-Length", "100")
			_, _ = io.WriteString(w, `{"a": 1, "b": [`)
			w.(http.Flusher).Flush()
			select {
			case <-r.Context().Done():
			case <-time.After(3 * time.Second):
			}
			return
		}
		hj, ok := w.(http.Hijacker)
		if !ok {
			t.Error("no hijacker")
			return
		}
		conn, buf, _ := hj.Hijack()
		_, _ = buf.WriteString("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"a\": 1, \"b\": [")
		_ = buf.Flush()
		if tc, ok := conn.(*net.TCPConn); ok {
			_ = tc.SetLinger(0)
		}
		_ = conn.Close()
	}, &hits)
	err := r162Client().GetJSON(context.Background(), srv.URL+"/cut", new(r162Out))
	if err == nil {
		t.Fatal("no error")
	}
	if cl := resilience.Classify(err); cl == resilience.ClassTerminal || cl == resilience.ClassPermanent {
		t.Errorf("a body cut short taken for a whole bad answer: class %v: %v", cl, err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Millisecond)
	defer cancel()
	err = r162Client().GetJSON(ctx, srv.URL+"/stall", new(r162Out))
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("deadline in the body not found by errors.Is: %v", err)
	}
	if cl := resilience.Classify(err); cl == resilience.ClassTerminal {
		t.Errorf("class terminal for the caller's deadline: %v", err)
	}
}

// A 2xx whose body came whole but whose encoding the transport undoes
// (Content-Encoding: gzip, which net/http asked for) is corrupt: the
// dependency's bad answer, which a retry meets again: never transient.
func TestReview162CorruptGzipIsNotTransient(t *testing.T) {
	var hits atomic.Int64
	srv := r162Serving(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Encoding", "gzip")
		_, _ = io.WriteString(w, `{"a":1} -- not gzip`)
	}, &hits)
	err := r162Client().GetJSON(context.Background(), srv.URL, new(r162Out))
	if err == nil {
		t.Fatal("no error")
	}
	cl := resilience.Classify(err)
	t.Logf("class %v, status %d, retried %v: %v", cl, retrysignal.Status(err), retrysignal.Retried(err), err)
	if cl.Retryable() {
		t.Errorf("a corrupt body that came whole is of class %v (retried): %v", cl, err)
	}
}

// The Client's messages name no query of the URL (unwrapURLError drops
// net/http's *url.Error for that; StatusError's URL has none): a decode
// error's neither.
func TestReview162DecodeMessageHasNoQuery(t *testing.T) {
	var hits atomic.Int64
	srv := r162Serving(t, func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "not json")
	}, &hits)
	err := r162Client().GetJSON(context.Background(), srv.URL+"/x?token=SECRET", new(r162Out))
	if err == nil {
		t.Fatal("no error")
	}
	if strings.Contains(err.Error(), "SECRET") {
		t.Errorf("decode error repeats the URL's query: %q", err.Error())
	}
}
