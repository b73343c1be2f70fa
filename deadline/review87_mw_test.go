package deadline_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/resiliencekit/resiliencekit/deadline"
)

func TestReview87_Middleware(t *testing.T) {
	cases := []struct {
		name   string
		hdr    map[string][]string
		want   bool // a deadline set by the middleware
		within time.Duration
	}{
		{"none", nil, false, 0},
		{"zero", map[string][]string{deadline.Header: {"0"}}, false, 0},
		{"zeros", map[string][]string{deadline.Header: {"000"}}, false, 0},
		{"spaced zero", map[string][]string{deadline.Header: {" 0 "}}, false, 0},
		{"one", map[string][]string{deadline.Header: {"1"}}, true, time.Millisecond},
		{"500", map[string][]string{deadline.Header: {"500"}}, true, 500 * time.Millisecond},
		{"repeated", map[string][]string{deadline.Header: {"500", "600"}}, false, 0},
		{"repeated same", map[string][]string{deadline.Header: {"500", "500"}}, false, 0},
		{"malformed", map[string][]string{deadline.Header: {"-5"}}, false, 0},
		{"empty", map[string][]string{deadline.Header: {""}}, false, 0},
		{"too long", map[string][]string{deadline.Header: {"1234567890"}}, false, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var got *http.Request
			h := deadline.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { got = r }))
			req := httptest.NewRequest("GET", "/", nil)
			for k, v := range c.hdr {
				req.Header[k] = v
			}
			req.Header.Set("X-Other", "x")
			before := req.Header.Clone()
			origCtx := req.Context()
			start := time.Now()
			h.ServeHTTP(httptest.NewRecorder(), req)
			// the caller's request is never modified
			if req.Context() != origCtx {
				t.Errorf("caller's context changed")
			}
			if len(req.Header) != len(before) {
				t.Errorf("caller's header changed: %v -> %v", before, req.Header)
			}
			for k, v := range before {
				w := req.Header[k]
				if len(w) != len(v) {
					t.Errorf("caller's header %s changed: %q -> %q", k, v, w)
					continue
				}
				for i := range v {
					if w[i] != v[i] {
						t.Errorf("caller's header %s changed: %q -> %q", k, v, w)
					}
				}
			}
			if got == nil {
				t.Fatal("next not called")
			}
			if got.Header.Get("X-Other") != "x" {
				t.Errorf("other header lost")
			}
			if len(c.hdr) > 0 {
				if got == req {
					t.Errorf("next got the caller's request")
				}
				for k := range got.Header {
					if len(k) == len(deadline.Header) && (k == deadline.Header || http.CanonicalHeaderKey(k) == deadline.Header) {
						t.Errorf("header %s still on the request next got: %q", k, got.Header[k])
					}
				}
			}
			d, ok := got.Context().Deadline()
			if ok != c.want {
				t.Errorf("deadline %v, want %v", ok, c.want)
			}
			if ok && (d.Before(start.Add(c.within)) || d.After(time.Now().Add(c.within))) {
				t.Errorf("deadline %v off", d.Sub(start))
			}
		})
	}
}

// The parent's earlier deadline wins; a 0 header keeps the parent's.
func TestReview87_MiddlewareParent(t *testing.T) {
	var got *http.Request
	var errIn error
	h := deadline.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { got, errIn = r, r.Context().Err() }))
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	pd, _ := ctx.Deadline()
	for _, v := range []string{"0", "1000", "x"} {
		req := httptest.NewRequest("GET", "/", nil).WithContext(ctx)
		req.Header.Set(deadline.Header, v)
		h.ServeHTTP(httptest.NewRecorder(), req)
		if d, ok := got.Context().Deadline(); !ok || !d.Equal(pd) {
			t.Errorf("%s: deadline %v %v, want the parent's", v, d, ok)
		}
		if errIn != nil {
			t.Errorf("%s: context done at once", v)
		}
	}
	// context canceled after the handler returns (no leak of the timer)
	req := httptest.NewRequest("GET", "/", nil)
	req.Header.Set(deadline.Header, "100000")
	h.ServeHTTP(httptest.NewRecorder(), req)
	if got.Context().Err() == nil {
		t.Errorf("the budget's context not canceled once the handler returned")
	}
}

// Real server, a proxy forwarding the headers: the next hop sees none.
func TestReview87_MiddlewareProxyForwardsNone(t *testing.T) {
	var seen []string
	back := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen = r.Header.Values(deadline.Header)
	}))
	defer back.Close()
	front := httptest.NewServer(deadline.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		out, _ := http.NewRequestWithContext(r.Context(), "GET", back.URL, nil)
		out.Header = r.Header.Clone()
		resp, err := http.DefaultClient.Do(out)
		if err == nil {
			resp.Body.Close()
		}
	})))
	defer front.Close()
	for _, vs := range [][]string{{"0"}, {"5", "6"}, {"abc"}, {"300"}} {
		req, _ := http.NewRequest("GET", front.URL, nil)
		req.Header[deadline.Header] = vs
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if len(seen) != 0 {
			t.Errorf("%q: forwarded %q", vs, seen)
		}
	}
}
