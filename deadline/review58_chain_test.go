package deadline_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/resiliencekit/resiliencekit/deadline"
	"github.com/resiliencekit/resiliencekit/httpclient"
)

// A hop that forwards its request with httputil.ReverseProxy forwards
// the header it received: the next hop gets the budget as it was when the
// proxy received it, not what is left.
func TestReview58ReverseProxyForwardsAStaleBudget(t *testing.T) {
	var got string
	var leafDeadline time.Time
	leaf := httptest.NewServer(deadline.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = r.Header.Get(deadline.Header)
		leafDeadline, _ = r.Context().Deadline()
	})))
	defer leaf.Close()
	u, _ := url.Parse(leaf.URL)
	rp := httputil.NewSingleHostReverseProxy(u)
	proxy := httptest.NewServer(deadline.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(300 * time.Millisecond) // auth, queueing...
		rp.ServeHTTP(w, r)
	})))
	defer proxy.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	root, _ := ctx.Deadline()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, proxy.URL, nil)
	deadline.Inject(ctx, req.Header)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	t.Logf("leaf got %s ms, its deadline %v after the root's", got, leafDeadline.Sub(root).Round(time.Millisecond))
	if leafDeadline.Sub(root) > 10*time.Millisecond {
		t.Errorf("behind a reverse proxy the leaf's deadline is %v after the caller's: the stale header was forwarded", leafDeadline.Sub(root).Round(time.Millisecond))
	}
}

// The caller's own cancel reaches a handler behind the middleware, with
// and without a budget; a budget longer than the hop's own deadline
// does not extend it.
func TestReview58CallerCancelAndOwnDeadline(t *testing.T) {
	var mu sync.Mutex
	var causes []error
	var deadlines []time.Duration
	done := make(chan struct{}, 10)
	h := deadline.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		d, _ := r.Context().Deadline()
		<-r.Context().Done()
		mu.Lock()
		causes = append(causes, context.Cause(r.Context()))
		deadlines = append(deadlines, time.Until(d))
		mu.Unlock()
		done <- struct{}{}
	}))
	// the hop's own: 100 ms
	own := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 100*time.Millisecond)
		defer cancel()
		h.ServeHTTP(w, r.WithContext(ctx))
	})
	srv := httptest.NewServer(own)
	defer srv.Close()
	for _, budget := range []string{"", "5000", "20"} {
		ctx, cancel := context.WithCancel(context.Background())
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
		if budget != "" {
			req.Header.Set(deadline.Header, budget)
		}
		start := time.Now()
		go func() { time.Sleep(10 * time.Millisecond); cancel() }()
		_, _ = http.DefaultClient.Do(req)
		select {
		case <-done:
		case <-time.After(2 * time.Second):
			t.Fatalf("budget %q: the handler did not see the caller's cancel", budget)
		}
		if e := time.Since(start); e > 80*time.Millisecond {
			t.Errorf("budget %q: the handler ended %v after the start", budget, e)
		}
	}
	_ = httpclient.New
	t.Logf("causes %v", causes)
}

// Hostile header values: none gives a deadline other than its digits
// say, or panics; a 10-digit value with leading zeros is refused.
func TestReview58HostileValues(t *testing.T) {
	cases := map[string]time.Duration{ // -1: no deadline
		"":                     -1,
		"-1":                   -1,
		"+1":                   -1,
		"1e3":                  -1,
		"0x10":                 -1,
		"１２":                   -1,
		"1 2":                  -1,
		" 12 ":                 12 * time.Millisecond,
		"\t12":                 12 * time.Millisecond,
		"12\r":                 -1,
		"999999999":            deadline.MaxBudget,
		"1000000000":           -1,
		"0000000012":           -1,
		"0":                    0,
		"99999999999999999999": -1,
		"12,13":                -1,
		"\x00":                 -1,
	}
	for v, want := range cases {
		d, ok := deadline.Parse(v)
		if want < 0 {
			if ok {
				t.Errorf("Parse(%q) = %v, want refused", v, d)
			}
			continue
		}
		if !ok || d != want {
			t.Errorf("Parse(%q) = %v, %v; want %v", v, d, ok, want)
		}
	}
	// through a real server: repeated, under another case, very long
	var got []bool
	srv := httptest.NewServer(deadline.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, ok := r.Context().Deadline()
		got = append(got, ok)
	})))
	defer srv.Close()
	for _, hv := range [][]string{{"10", "20"}, {"5000"}} {
		req, _ := http.NewRequest(http.MethodGet, srv.URL, nil)
		req.Header["request-timeout-ms"] = hv
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
		}
	}
	if len(got) != 2 || got[0] || !got[1] {
		t.Errorf("deadline set: %v, want [false true] (two values ignored, one under lower case used)", got)
	}
}
