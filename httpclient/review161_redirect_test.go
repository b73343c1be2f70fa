package httpclient_test

import (
	"context"
	"errors"
	"io"
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

func review161Pipeline() *pipeline.Pipeline {
	return pipeline.New(pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(3), retrypolicy.BaseDelay(time.Millisecond), retrypolicy.MaxDelay(2*time.Millisecond))))
}

// countingRT counts the closes of each response body it hands out.
type countingRT struct {
	base   http.RoundTripper
	closes atomic.Int64
	bodies atomic.Int64
}

type countBody struct {
	io.ReadCloser
	n *atomic.Int64
}

func (b *countBody) Close() error { b.n.Add(1); return b.ReadCloser.Close() }

func (c *countingRT) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := c.base.RoundTrip(r)
	if resp != nil {
		c.bodies.Add(1)
		resp.Body = &countBody{resp.Body, &c.closes}
	}
	return resp, err
}

// A redirect the policy refuses: the promise is a *StatusError of the 3xx
// (class permanent, 502, Retried), the policy's error reachable, the body
// closed exactly once, one request sent.
func TestReview161_RedirectRefused_Shape(t *testing.T) {
	var hits atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		w.Header().Set("Location", "/elsewhere?secret=s3cr3t")
		w.WriteHeader(http.StatusFound)
		io.WriteString(w, "redirect body")
	}))
	defer srv.Close()
	policyErr := errors.New("review161: no redirects")
	rt := &countingRT{base: http.DefaultTransport}
	c := httpclient.New(httpclient.Base(rt), httpclient.WithPipeline(review161Pipeline()),
		httpclient.CheckRedirect(func(*http.Request, []*http.Request) error { return policyErr }))
	var out map[string]any
	err := c.GetJSON(context.Background(), srv.URL+"/x?token=abc", &out)
	if err == nil {
		t.Fatal("no error")
	}
	if !errors.Is(err, policyErr) {
		t.Errorf("policy error not reachable: %v", err)
	}
	var se *httpclient.StatusError
	if !errors.As(err, &se) || se.StatusCode != http.StatusFound {
		t.Fatalf("no StatusError of the 302: %v", err)
	}
	if c := resilience.Classify(err); c != resilience.ClassPermanent {
		t.Errorf("class %v, want permanent", c)
	}
	if s := retrysignal.Status(err); s != http.StatusBadGateway {
		t.Errorf("Status %d, want 502", s)
	}
	if !retrysignal.Retried(err) {
		t.Errorf("Retried false")
	}
	if hits.Load() != 1 {
		t.Errorf("server hit %d times, want 1", hits.Load())
	}
	if strings.Contains(err.Error(), "token=abc") || strings.Contains(err.Error(), "s3cr3t") {
		t.Errorf("query leaked into message: %v", err)
	}
	if rt.closes.Load() != rt.bodies.Load() {
		t.Errorf("bodies %d closed %d times", rt.bodies.Load(), rt.closes.Load())
	}
}

// The Client's doc: "A status outside 2xx is returned as an error that
// errors.As finds a *StatusError in, with an excerpt of the body." The 3xx
// handed back (ErrUseLastResponse) has its excerpt; one whose redirect was
// refused has none, as the doc says: net/http has read its body.
func TestReview161_RedirectRefused_BodyExcerpt(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Location", "/elsewhere")
		w.WriteHeader(http.StatusFound)
		io.WriteString(w, "moved: see elsewhere")
	}))
	defer srv.Close()
	for _, tc := range []struct {
		name string
		err  error
	}{{"refused", errors.New("no")}, {"uselast", http.ErrUseLastResponse}} {
		c := httpclient.New(httpclient.WithPipeline(review161Pipeline()),
			httpclient.CheckRedirect(func(*http.Request, []*http.Request) error { return tc.err }))
		err := c.GetJSON(context.Background(), srv.URL, new(map[string]any))
		var se *httpclient.StatusError
		if !errors.As(err, &se) {
			t.Fatalf("%s: no StatusError: %v", tc.name, err)
		}
		if tc.name == "refused" {
			if len(se.Body) != 0 {
				t.Errorf("refused: Body %q: the doc says none", se.Body)
			}
			continue
		}
		if string(se.Body) != "moved: see elsewhere" {
			t.Errorf("%s: Body %q, want the 3xx's body excerpt", tc.name, se.Body)
		}
	}
}

// net/http's 10-redirect limit: a loop is sent 11 times (not retried at
// this layer), class permanent.
func TestReview161_RedirectLoop_NotRetried(t *testing.T) {
	var hits atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		http.Redirect(w, r, "/loop", http.StatusFound)
	}))
	defer srv.Close()
	rt := &countingRT{base: http.DefaultTransport}
	c := httpclient.New(httpclient.Base(rt), httpclient.WithPipeline(review161Pipeline()))
	err := c.GetJSON(context.Background(), srv.URL, new(map[string]any))
	var se *httpclient.StatusError
	if !errors.As(err, &se) || se.StatusCode != http.StatusFound {
		t.Fatalf("no StatusError: %v", err)
	}
	if resilience.Classify(err) != resilience.ClassPermanent {
		t.Errorf("class %v", resilience.Classify(err))
	}
	if hits.Load() != 10 {
		t.Errorf("hits %d, want 10", hits.Load())
	}
	if rt.closes.Load() < rt.bodies.Load() {
		t.Errorf("bodies %d closed %d times", rt.bodies.Load(), rt.closes.Load())
	}
}

// A policy that gives up because the caller went away (it returns the
// request context's error, as a policy that checks it does): the call's
// error is the caller's cancellation. It must classify as canceled (not
// permanent), not carry the "don't retry" signal as if the dependency had
// answered, and answer 503 (the caller went away), as it did before the
// fix.
func TestReview161_RedirectRefused_CallerCanceled(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/next", http.StatusFound)
	}))
	defer srv.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c := httpclient.New(httpclient.WithPipeline(review161Pipeline()),
		httpclient.CheckRedirect(func(req *http.Request, _ []*http.Request) error {
			cancel() // the caller goes away as the redirect comes back
			return req.Context().Err()
		}))
	err := c.GetJSON(ctx, srv.URL, new(map[string]any))
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("not canceled: %v", err)
	}
	if cl := resilience.Classify(err); cl != resilience.ClassCanceled {
		t.Errorf("class %v, want canceled (the caller's, not the dependency's answer)", cl)
	}
	if retrysignal.Retried(err) {
		t.Errorf("Retried true for a caller that went away")
	}
	if s := retrysignal.Status(err); s != http.StatusServiceUnavailable {
		t.Errorf("Status %d, want 503 (the caller went away)", s)
	}
}

// A policy that marks its refusal as the caller's own (rejected) keeps
// that class.
func TestReview161_RedirectRefused_PolicyClassKept(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/next", http.StatusFound)
	}))
	defer srv.Close()
	c := httpclient.New(httpclient.WithPipeline(review161Pipeline()),
		httpclient.CheckRedirect(func(req *http.Request, _ []*http.Request) error {
			return resilience.Rejected(errors.New("cross-host redirect refused"))
		}))
	err := c.GetJSON(context.Background(), srv.URL, new(map[string]any))
	if cl := resilience.Classify(err); cl != resilience.ClassRejected {
		t.Errorf("class %v, want the policy's rejected", cl)
	}
}
