package deadline_test

// review169: extreme budgets through the header.

import (
	"context"
	"math"
	"net/http"
	"net/http/httptest"
	"testing"
	"testing/synctest"
	"time"

	"github.com/resiliencekit/resiliencekit/deadline"
)

func TestReview169Parse(t *testing.T) {
	cases := []struct {
		v    string
		want time.Duration
		ok   bool
	}{
		{"0", 0, true},
		{"1", time.Millisecond, true},
		{"999999999", deadline.MaxBudget, true},
		{"000000001", time.Millisecond, true},
		{"0000000001", 0, false}, // 10 digits
		{"1000000000", 0, false},
		{"9223372036854775807", 0, false},
		{"-1", 0, false},
		{"+1", 0, false},
		{"1e3", 0, false},
		{"0x10", 0, false},
		{"", 0, false},
		{" \t", 0, false},
		{" 5\t", 5 * time.Millisecond, true},
		{"5 5", 0, false},
		{"\u0665", 0, false}, // Arabic-Indic five
		{"５", 0, false},      // fullwidth five
		{"5\n", 0, false},
	}
	for _, tc := range cases {
		got, ok := deadline.Parse(tc.v)
		if got != tc.want || ok != tc.ok {
			t.Errorf("Parse(%q) = %v, %v; want %v, %v", tc.v, got, ok, tc.want, tc.ok)
		}
	}
}

func TestReview169Inject(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cases := []struct {
			d    time.Duration // deadline from now
			want string
		}{
			{time.Duration(math.MaxInt64), "999999999"},
			{deadline.MaxBudget + time.Hour, "999999999"},
			{deadline.MaxBudget, "999999999"},
			{deadline.MaxBudget - 1, "999999999"},
			{time.Nanosecond, "1"},
			{time.Millisecond, "1"},
			{time.Millisecond + 1, "2"},
			{-time.Hour, "0"},
			{time.Duration(math.MinInt64), "0"},
		}
		for _, tc := range cases {
			ctx, cancel := context.WithDeadline(context.Background(), time.Now().Add(tc.d))
			h := http.Header{}
			if !deadline.Inject(ctx, h) {
				t.Fatalf("Inject reported no deadline")
			}
			if got := h.Get(deadline.Header); got != tc.want {
				t.Errorf("deadline in %v: header %q, want %q", tc.d, got, tc.want)
			}
			cancel()
		}
	})
}

// TestReview169MiddlewareMax: the longest budget, and a too long one
// (ignored), end as the doc says.
func TestReview169MiddlewareMax(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var got time.Duration
		var had bool
		h := deadline.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			var dl time.Time
			dl, had = r.Context().Deadline()
			got = time.Until(dl)
		}))
		for _, tc := range []struct {
			v    string
			want time.Duration
			has  bool
		}{
			{"999999999", deadline.MaxBudget, true},
			{"1000000000", 0, false},
			{"0", 0, false},
			{"1", time.Millisecond, true},
		} {
			req := httptest.NewRequest(http.MethodGet, "/", nil)
			req.Header.Set(deadline.Header, tc.v)
			h.ServeHTTP(httptest.NewRecorder(), req)
			if had != tc.has || (had && got != tc.want) {
				t.Errorf("header %q: deadline %v (has %v), want %v (has %v)", tc.v, got, had, tc.want, tc.has)
			}
		}
	})
}
