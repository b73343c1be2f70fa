package deadline_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"testing/synctest"
	"time"

	"github.com/resiliencekit/resiliencekit/deadline"
)

// What the handler sees for each header value, the request's own context
// having a deadline 2 s away (a caller of this hop's middleware stack).
func TestReview127MiddlewareValues(t *testing.T) {
	for _, tc := range []struct {
		vals []string
		want time.Duration // -1: the outer deadline stands (2s)
	}{
		{[]string{"500"}, 500 * time.Millisecond},
		{[]string{" 500\t"}, 500 * time.Millisecond},
		{[]string{"999999999"}, -1}, // longer than the caller's: the caller's stands
		{[]string{"1000000000"}, -1},
		{[]string{"-5"}, -1},
		{[]string{"+5"}, -1},
		{[]string{"0"}, -1},
		{[]string{"5e3"}, -1},
		{[]string{"0x10"}, -1},
		{[]string{"5, 6"}, -1},
		{[]string{"5", "6"}, -1},
		{[]string{""}, -1},
		{[]string{"\u00a05"}, -1},
		{[]string{"000000001"}, time.Millisecond},
		{[]string{"0000000001"}, -1},
	} {
		synctest.Test(t, func(t *testing.T) {
			var got time.Duration = -2
			var hdr []string
			h := deadline.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				d, ok := r.Context().Deadline()
				if ok {
					got = time.Until(d)
				}
				hdr = r.Header.Values(deadline.Header)
			}))
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			r := httptest.NewRequestWithContext(ctx, "GET", "/", nil)
			for _, v := range tc.vals {
				r.Header.Add(deadline.Header, v)
			}
			h.ServeHTTP(httptest.NewRecorder(), r)
			want := tc.want
			if want < 0 {
				want = 2 * time.Second
			}
			if got != want {
				t.Errorf("%q: deadline in %v, want %v", tc.vals, got, want)
			}
			if len(hdr) != 0 {
				t.Errorf("%q: header forwarded: %q", tc.vals, hdr)
			}
			if len(r.Header.Values(deadline.Header)) != len(tc.vals) {
				t.Errorf("%q: caller's request header changed", tc.vals)
			}
		})
	}
}

// Inject then Middleware: the hop's deadline is never before the caller's,
// and at most 1 ms after it; for huge and past deadlines too.
func TestReview127InjectRoundTrip(t *testing.T) {
	for _, left := range []time.Duration{-time.Hour, 0, 1, time.Millisecond - 1, time.Millisecond, time.Millisecond + 1, 1234567 * time.Microsecond, deadline.MaxBudget, deadline.MaxBudget + 1, 1<<63 - 1} {
		synctest.Test(t, func(t *testing.T) {
			ctx, cancel := context.WithDeadline(context.Background(), time.Now().Add(left))
			defer cancel()
			h := http.Header{}
			if !deadline.Inject(ctx, h) {
				t.Fatal("no deadline")
			}
			d, ok := deadline.Parse(h.Get(deadline.Header))
			if !ok {
				t.Fatalf("%v: sent %q, which Parse refuses", left, h.Get(deadline.Header))
			}
			callerLeft := max(left, 0)
			if callerLeft <= deadline.MaxBudget && (d < callerLeft || d-callerLeft >= time.Millisecond) {
				t.Fatalf("%v: sent %v", left, d)
			}
			if callerLeft > deadline.MaxBudget && d != deadline.MaxBudget {
				t.Fatalf("%v: sent %v", left, d)
			}
		})
	}
}

// Stale header in another case is dropped by Inject with no deadline.
func TestReview127InjectNoDeadlineDropsAllCases(t *testing.T) {
	h := http.Header{"request-timeout-ms": {"5"}, "REQUEST-TIMEOUT-MS": {"6"}, deadline.Header: {"7"}}
	if deadline.Inject(context.Background(), h) || len(h) != 0 {
		t.Fatalf("left %v", h)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	h = http.Header{"request-timeout-ms": {"5"}, "REQUEST-TIMEOUT-MS": {"6"}}
	deadline.Inject(ctx, h)
	if len(h) != 1 || len(h[deadline.Header]) != 1 {
		t.Fatalf("left %v", h)
	}
}

// Over a real server: a header with a budget longer than the caller's
// own deadline does not lengthen it, and a short one shortens it.
func TestReview127RealServer(t *testing.T) {
	got := make(chan time.Duration, 1)
	srv := httptest.NewServer(deadline.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		d, ok := r.Context().Deadline()
		if !ok {
			got <- -1
			return
		}
		got <- time.Until(d)
	})))
	defer srv.Close()
	for _, v := range []string{"250", "999999999"} {
		req, _ := http.NewRequest("GET", srv.URL, nil)
		req.Header.Set(deadline.Header, v)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		d := <-got
		want, _ := deadline.Parse(v)
		if d <= 0 || d > want {
			t.Fatalf("%s: deadline in %v", v, d)
		}
	}
}
