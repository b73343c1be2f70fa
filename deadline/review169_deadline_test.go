package deadline_test

// review169: the budget header is never negative or in the past, is
// consistent with the budget left, and a malformed or huge one does not
// make the server fail healthy work (fail open).

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"testing/synctest"
	"time"

	"github.com/resiliencekit/resiliencekit/deadline"
)

func TestReview169_InjectConsistent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		offsets := []time.Duration{-time.Hour, -time.Millisecond, 0, time.Nanosecond, 300 * time.Microsecond,
			time.Millisecond, time.Millisecond + 1, 1500 * time.Microsecond, 999 * time.Millisecond, 2 * time.Second,
			deadline.MaxBudget - 1, deadline.MaxBudget, deadline.MaxBudget + 1, 100 * 24 * time.Hour, 1 << 62}
		for _, off := range offsets {
			ctx, cancel := context.WithDeadline(context.Background(), time.Now().Add(off))
			h := http.Header{}
			if !deadline.Inject(ctx, h) {
				t.Fatalf("%v: Inject reported no deadline", off)
			}
			vs := h.Values(deadline.Header)
			if len(vs) != 1 {
				t.Fatalf("%v: header %v", off, vs)
			}
			d, ok := deadline.Parse(vs[0])
			if !ok || d < 0 {
				t.Fatalf("%v: header %q does not parse or is negative", off, vs[0])
			}
			left := max(off, 0)
			want := min(left, deadline.MaxBudget)
			if d < want || d > want+time.Millisecond {
				t.Errorf("%v: header %q (%v), want [%v, %v+1ms]", off, vs[0], d, want, want)
			}
			cancel()
		}
	})
}

func TestReview169_MiddlewareFailsOpen(t *testing.T) {
	for _, vs := range [][]string{{"abc"}, {"-1"}, {"-0"}, {"1e3"}, {"1.5"}, {"9999999999"}, {""}, {"0"},
		{"+5"}, {"0x10"}, {"١٢٣"}, {"100ms"}, {"100", "200"}, {"999999999"}, {"000000000"},
		{"18446744073709551616"}, {"5000, 100"}} {
		var ran bool
		var err error
		var left time.Duration
		var hasDeadline bool
		h := deadline.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			time.Sleep(20 * time.Millisecond) // healthy work
			ran = true
			err = r.Context().Err()
			if d, ok := r.Context().Deadline(); ok {
				hasDeadline = true
				left = time.Until(d)
			}
			if r.Header.Get(deadline.Header) != "" {
				t.Errorf("%q: header forwarded to the handler", vs)
			}
		}))
		req := httptest.NewRequest("GET", "/", nil)
		for _, v := range vs {
			req.Header.Add(deadline.Header, v)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if !ran || err != nil || rec.Code != 200 {
			t.Errorf("header %q: ran %v, ctx err %v, code %d: healthy work failed", vs, ran, err, rec.Code)
		}
		if hasDeadline && left < time.Second {
			t.Errorf("header %q: the handler got a deadline %v away", vs, left)
		}
	}
}

// The deadline the middleware gives is the budget counted from when it
// runs: never shorter than what the header said, less the time since.
func TestReview169_MiddlewareDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		for _, v := range []string{"1", "2", "250", "1000", "999999999"} {
			want, _ := deadline.Parse(v)
			var left time.Duration
			h := deadline.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				d, ok := r.Context().Deadline()
				if !ok {
					t.Fatalf("%s: no deadline", v)
				}
				left = time.Until(d)
			}))
			req := httptest.NewRequest("GET", "/", nil)
			req.Header.Set(deadline.Header, v)
			h.ServeHTTP(httptest.NewRecorder(), req)
			if left != want {
				t.Errorf("%s: handler got %v, want %v", v, left, want)
			}
		}
	})
}
