package deadline_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/resiliencekit/resiliencekit/deadline"
)

// Hostile or extreme values: only 1 to 9 ASCII digits (spaces or tabs
// around) above 0 bound the context, by exactly that; the header never
// reaches the handler, taken or not.
func TestReview158_HeaderValues(t *testing.T) {
	cases := []struct {
		vals []string
		want time.Duration // 0: no deadline
	}{
		{[]string{"1"}, time.Millisecond},
		{[]string{" 25\t"}, 25 * time.Millisecond},
		{[]string{"000000025"}, 25 * time.Millisecond},
		{[]string{"0000000025"}, 0},
		{[]string{"999999999"}, deadline.MaxBudget},
		{[]string{"1000000000"}, 0},
		{[]string{"9223372036854775807"}, 0},
		{[]string{"99999999999999999999999"}, 0},
		{[]string{"-1"}, 0},
		{[]string{"+5"}, 0},
		{[]string{"5.5"}, 0},
		{[]string{"1e3"}, 0},
		{[]string{"0x10"}, 0},
		{[]string{"NaN"}, 0},
		{[]string{"Inf"}, 0},
		{[]string{"５"}, 0},
		{[]string{"5,6"}, 0},
		{[]string{"5", "6"}, 0},
		{[]string{"5", "5"}, 0},
		{[]string{""}, 0},
		{[]string{"0"}, 0},
		{[]string{"5\x00"}, 0},
		{[]string{"\v5"}, 0},
	}
	for _, tc := range cases {
		var got time.Duration
		var has bool
		var leaked []string
		h := deadline.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			var dl time.Time
			dl, has = r.Context().Deadline()
			got = time.Until(dl)
			leaked = r.Header.Values(deadline.Header)
		}))
		r := httptest.NewRequest("GET", "/", nil)
		r.Header[deadline.Header] = tc.vals
		h.ServeHTTP(httptest.NewRecorder(), r)
		if len(leaked) != 0 {
			t.Errorf("%q: header reached the handler: %q", tc.vals, leaked)
		}
		if tc.want == 0 {
			if has {
				t.Errorf("%q: got a deadline %v away", tc.vals, got)
			}
			continue
		}
		if !has || got > tc.want || got < tc.want-50*time.Millisecond {
			t.Errorf("%q: deadline %v (has %v), want %v", tc.vals, got, has, tc.want)
		}
		if len(r.Header.Values(deadline.Header)) != len(tc.vals) {
			t.Errorf("%q: the caller's request was modified", tc.vals)
		}
	}
}

// Inject at the extremes: a deadline far off is MaxBudget; one just past or
// now is 0; a sub-millisecond rest is rounded up to 1.
func TestReview158_InjectExtremes(t *testing.T) {
	far, c1 := context.WithDeadline(context.Background(), time.Now().Add(100*365*24*time.Hour))
	defer c1()
	h := http.Header{}
	if !deadline.Inject(far, h) || h.Get(deadline.Header) != "999999999" {
		t.Errorf("far: %q", h.Get(deadline.Header))
	}
	maxT, c2 := context.WithDeadline(context.Background(), time.Unix(1<<62, 0))
	defer c2()
	if !deadline.Inject(maxT, h) || h.Get(deadline.Header) != "999999999" {
		t.Errorf("max time: %q", h.Get(deadline.Header))
	}
	past, c3 := context.WithDeadline(context.Background(), time.Unix(0, 0))
	defer c3()
	if !deadline.Inject(past, h) || h.Get(deadline.Header) != "0" {
		t.Errorf("past: %q", h.Get(deadline.Header))
	}
	soon, c4 := context.WithTimeout(context.Background(), 300*time.Microsecond)
	defer c4()
	h2 := http.Header{"request-timeout-ms": {"77"}, "REQUEST-TIMEOUT-MS": {"78"}}
	if !deadline.Inject(soon, h2) {
		t.Fatal("no deadline")
	}
	if v := h2.Get(deadline.Header); v != "1" && v != "0" {
		t.Errorf("soon: %q", v)
	}
	if len(h2) != 1 {
		t.Errorf("stale spellings kept: %v", h2)
	}
}
