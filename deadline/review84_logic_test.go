package deadline_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"testing/synctest"
	"time"

	"github.com/resiliencekit/resiliencekit/deadline"
)

// Inject rounds up, caps, and sends 0 only for a past deadline.
func TestReview84_InjectRounding(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cases := []struct {
			left time.Duration
			want string
		}{
			{1500*time.Millisecond + 300*time.Microsecond, "1501"},
			{time.Nanosecond, "1"},
			{time.Millisecond, "1"},
			{time.Millisecond + 1, "2"},
			{0, "0"},
			{-time.Hour, "0"},
			{deadline.MaxBudget, "999999999"},
			{deadline.MaxBudget + 1, "999999999"},
			{time.Duration(1<<63 - 1), "999999999"},
		}
		for _, c := range cases {
			ctx, cancel := context.WithDeadline(context.Background(), time.Now().Add(c.left))
			h := http.Header{}
			h["request-timeout-ms"] = []string{"77"}
			h.Set(deadline.Header, "88")
			if !deadline.Inject(ctx, h) {
				t.Fatalf("%v: no deadline reported", c.left)
			}
			if got := h.Values(deadline.Header); len(got) != 1 || got[0] != c.want {
				t.Errorf("left %v: header %q, want %q", c.left, got, c.want)
			}
			if _, ok := h["request-timeout-ms"]; ok {
				t.Errorf("left %v: lower-case key kept", c.left)
			}
			cancel()
		}
		// No deadline: header removed.
		h := http.Header{}
		h.Set(deadline.Header, "5")
		h["REQUEST-TIMEOUT-MS"] = []string{"5"}
		if deadline.Inject(context.Background(), h) || len(h) != 0 {
			t.Errorf("no deadline: header %v", h)
		}
	})
}

func TestReview84_ParseHostile(t *testing.T) {
	good := map[string]time.Duration{
		"0": 0, "1": time.Millisecond, " 5 ": 5 * time.Millisecond, "\t7\t": 7 * time.Millisecond,
		"999999999": deadline.MaxBudget, "000000001": time.Millisecond,
	}
	for v, want := range good {
		d, ok := deadline.Parse(v)
		if !ok || d != want {
			t.Errorf("Parse(%q) = %v,%v want %v", v, d, ok, want)
		}
	}
	bad := []string{"", " ", "-1", "+1", "1.5", "1e3", "0x10", "1000000000", "9223372036854775807",
		"99999999999999999999999", "5, 6", "5 6", "٣", "１", "5\n", "\x00", "1_000", "5ms", "-0"}
	for _, v := range bad {
		if d, ok := deadline.Parse(v); ok {
			t.Errorf("Parse(%q) = %v, accepted", v, d)
		}
	}
}

// Middleware, in a bubble: deadline set exactly from header; hostile headers ignored; header stripped.
func TestReview84_MiddlewareHeaders(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		type seen struct {
			has  bool
			left time.Duration
			hdr  []string
			err  error
		}
		run := func(vals []string, parent time.Duration) seen {
			var s seen
			h := deadline.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				dl, ok := r.Context().Deadline()
				s = seen{has: ok, left: time.Until(dl), hdr: r.Header.Values(deadline.Header), err: r.Context().Err()}
			}))
			req := httptest.NewRequest("GET", "/", nil)
			if parent > 0 {
				ctx, cancel := context.WithTimeout(req.Context(), parent)
				defer cancel()
				req = req.WithContext(ctx)
			}
			for _, v := range vals {
				req.Header.Add(deadline.Header, v)
			}
			orig := req.Header.Clone()
			h.ServeHTTP(httptest.NewRecorder(), req)
			if len(orig.Values(deadline.Header)) != len(req.Header.Values(deadline.Header)) {
				t.Errorf("caller's request header modified")
			}
			return s
		}
		if s := run([]string{"250"}, 0); !s.has || s.left != 250*time.Millisecond || len(s.hdr) != 0 {
			t.Errorf("250: %+v", s)
		}
		if s := run([]string{" 250\t"}, 0); !s.has || s.left != 250*time.Millisecond {
			t.Errorf("padded: %+v", s)
		}
		if s := run([]string{"250"}, 100*time.Millisecond); !s.has || s.left != 100*time.Millisecond {
			t.Errorf("earlier parent kept: %+v", s)
		}
		if s := run([]string{"999999999"}, 0); !s.has || s.left != deadline.MaxBudget {
			t.Errorf("max: %+v", s)
		}
		for _, v := range [][]string{{"1000000000"}, {"9223372036854775807"}, {"-5"}, {"abc"}, {"5", "6"}, {"5, 6"}, {""}} {
			s := run(v, 0)
			if s.has || s.err != nil {
				t.Errorf("%q: deadline set %+v", v, s)
			}
			if len(s.hdr) != 0 {
				t.Errorf("ignored %q: header left on the request next gets: %q", v, s.hdr)
			}
		}
		if s := run([]string{"0"}, 0); s.has || s.err != nil || len(s.hdr) != 0 {
			t.Errorf("header 0: %+v", s)
		}
	})
}

// No timer/goroutine is left per request.
func TestReview84_MiddlewareNoLeak(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := deadline.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			go func() { <-r.Context().Done() }() // would leak if ctx were never canceled
		}))
		for i := 0; i < 1000; i++ {
			req := httptest.NewRequest("GET", "/", nil)
			req.Header.Set(deadline.Header, strconv.Itoa(999999999-i))
			h.ServeHTTP(httptest.NewRecorder(), req)
		}
		synctest.Wait() // the bubble fails at exit if any goroutine remains blocked
	})
}
