package deadline_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/resiliencekit/resiliencekit/deadline"
	"github.com/resiliencekit/resiliencekit/httpclient"
)

func TestReview42ParseHostile(t *testing.T) {
	bad := []string{"", " ", "-1", "+1", "1.5", "0.5", "1e3", "0x10", "１", "1 2", "1,2", "9223372036854775807",
		"1000000000", "99999999999999999999", "NaN", "Inf", "-0", "1\x00", "1\n", "٣", "1_000", "\v1", "1ms", "1s"}
	for _, v := range bad {
		if d, ok := deadline.Parse(v); ok {
			t.Errorf("Parse(%q) = %v, true; want false", v, d)
		}
	}
	good := map[string]time.Duration{"0": 0, "000000001": time.Millisecond, " \t7\t ": 7 * time.Millisecond,
		"999999999": deadline.MaxBudget}
	for v, want := range good {
		if d, ok := deadline.Parse(v); !ok || d != want {
			t.Errorf("Parse(%q) = %v, %v; want %v", v, d, ok, want)
		}
	}
}

// The middleware never extends a deadline the context already has, and
// leaves a request without (or with a bad or repeated) header unchanged.
func TestReview42MiddlewareNeverExtends(t *testing.T) {
	var got time.Time
	var had bool
	var sameCtx bool
	var in context.Context
	h := deadline.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got, had = r.Context().Deadline()
		sameCtx = r.Context() == in
	}))
	parent, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	pd, _ := parent.Deadline()
	for _, v := range [][]string{{"999999999"}, {"100000"}, {"51"}} {
		r := httptest.NewRequest("GET", "/", nil).WithContext(parent)
		in = parent
		r.Header[deadline.Header] = v
		h.ServeHTTP(httptest.NewRecorder(), r)
		if !had || got.After(pd) {
			t.Errorf("header %v: deadline %v after parent's %v", v, got, pd)
		}
	}
	for _, v := range [][]string{nil, {}, {"5", "5"}, {"abc"}, {"-5"}, {"5, 6"}} {
		r := httptest.NewRequest("GET", "/", nil)
		in = r.Context()
		if v != nil {
			r.Header[deadline.Header] = v
		}
		h.ServeHTTP(httptest.NewRecorder(), r)
		if had || !sameCtx {
			t.Errorf("header %q: deadline %v (had %v), same ctx %v", v, got, had, sameCtx)
		}
	}
	// 0: ignored (Inject sends it only for a caller gone; another
	// convention means "no limit" by it), the header taken off.
	r := httptest.NewRequest("GET", "/", nil)
	r.Header.Set(deadline.Header, "0")
	var err error
	var has bool
	var left []string
	deadline.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		err, left = r.Context().Err(), r.Header.Values(deadline.Header)
		_, has = r.Context().Deadline()
	})).ServeHTTP(httptest.NewRecorder(), r)
	if err != nil || has || len(left) != 0 {
		t.Errorf("budget 0: context done %v, deadline %v, header left %q", err, has, left)
	}
	if r.Header.Get(deadline.Header) != "0" {
		t.Errorf("the caller's request changed")
	}
}

func TestReview42InjectExtremes(t *testing.T) {
	h := http.Header{}
	h["request-timeout-ms"] = []string{"1"}
	h["REQUEST-TIMEOUT-MS"] = []string{"2"}
	h[deadline.Header] = []string{"3"}
	if deadline.Inject(context.Background(), h) || len(h) != 0 {
		t.Fatalf("no deadline: header left %v", h)
	}
	ctx, c := context.WithDeadline(context.Background(), time.Now().Add(-time.Hour))
	defer c()
	deadline.Inject(ctx, h)
	if h.Get(deadline.Header) != "0" {
		t.Errorf("past: %q", h.Get(deadline.Header))
	}
	ctx, c = context.WithDeadline(context.Background(), time.Now().Add(1<<62))
	defer c()
	deadline.Inject(ctx, h)
	if h.Get(deadline.Header) != "999999999" {
		t.Errorf("far: %q", h.Get(deadline.Header))
	}
	// A deadline at the largest time: time.Until saturates.
	ctx, c = context.WithDeadline(context.Background(), time.Unix(1<<62, 0))
	defer c()
	deadline.Inject(ctx, h)
	if h.Get(deadline.Header) != "999999999" {
		t.Errorf("max time: %q", h.Get(deadline.Header))
	}
	// A fractional millisecond rounds up, never to more than 1 ms over.
	ctx, c = context.WithTimeout(context.Background(), 1500*time.Microsecond)
	defer c()
	deadline.Inject(ctx, h)
	if v := h.Get(deadline.Header); v != "2" {
		t.Errorf("1.5 ms: %q", v)
	}
	// Wall-clock-only deadline (no monotonic reading).
	ctx, c = context.WithDeadline(context.Background(), time.Now().Round(0).Add(100*time.Millisecond))
	defer c()
	deadline.Inject(ctx, h)
	if d, ok := deadline.Parse(h.Get(deadline.Header)); !ok || d > 101*time.Millisecond || d < 90*time.Millisecond {
		t.Errorf("wall deadline: %q", h.Get(deadline.Header))
	}
}

// A chain of hops, each with the middleware and httpclient: how far past the
// origin's deadline is each hop's, and how soon after the origin gives up
// does each hop's context end?
func TestReview42NestedHops(t *testing.T) {
	const hops = 6
	type seen struct {
		deadline time.Time
		done     time.Time
	}
	var mu sync.Mutex
	got := make([]seen, hops)
	urls := make([]string, hops+1)
	client := &http.Client{Transport: httpclient.NewTransport()}
	var servers []*httptest.Server
	for i := hops - 1; i >= 0; i-- {
		i := i
		next := urls[i+1]
		srv := httptest.NewServer(deadline.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			d, _ := r.Context().Deadline()
			mu.Lock()
			got[i].deadline = d
			mu.Unlock()
			time.Sleep(3 * time.Millisecond) // work
			if next != "" {
				req, _ := http.NewRequestWithContext(r.Context(), "GET", next, nil)
				if resp, err := client.Do(req); err == nil {
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
			} else {
				<-r.Context().Done() // the last hop hangs
			}
			<-r.Context().Done()
			mu.Lock()
			got[i].done = time.Now()
			mu.Unlock()
		})))
		servers = append(servers, srv)
		urls[i] = srv.URL
	}
	defer func() {
		for _, s := range servers {
			s.Close()
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	origin, _ := ctx.Deadline()
	req, _ := http.NewRequestWithContext(ctx, "GET", urls[0], nil)
	resp, err := client.Do(req)
	if err == nil {
		resp.Body.Close()
	}
	time.Sleep(200 * time.Millisecond)
	mu.Lock()
	defer mu.Unlock()
	for i, s := range got {
		over := s.deadline.Sub(origin)
		late := s.done.Sub(origin)
		t.Logf("hop %d: deadline %+v after origin's, context done %+v after it", i, over, late)
		if s.deadline.IsZero() {
			t.Errorf("hop %d: no deadline", i)
		}
		// Documented: each hop runs out after its caller (rounded up, plus
		// the request's transit): logged, not failed, within 20 ms a hop.
		if over > time.Duration(i+1)*20*time.Millisecond {
			t.Errorf("hop %d: deadline %v past the origin's", i, over)
		}
		if late > 50*time.Millisecond {
			t.Errorf("hop %d: context done %v after the origin gave up", i, late)
		}
	}
}
