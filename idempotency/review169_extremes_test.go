package idempotency_test

// review169: extreme guard and middleware options against a healthy
// handler and a healthy (memory) store.

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/resiliencekit/resiliencekit/idempotency"
)

const r169Max = time.Duration(math.MaxInt64)

func TestReview169HealthyWithExtremeOptions(t *testing.T) {
	cases := []struct {
		name   string
		store  func() idempotency.Store
		opts   []idempotency.Option
		replay bool // the repeat is replayed
	}{
		{"ttl max", nil, []idempotency.Option{idempotency.TTL(r169Max)}, true},
		{"ttl max-1", nil, []idempotency.Option{idempotency.TTL(r169Max - 1)}, true},
		{"lease max", nil, []idempotency.Option{idempotency.Lease(r169Max)}, true},
		{"lease max store timeout max/3", nil, []idempotency.Option{idempotency.Lease(r169Max), idempotency.StoreTimeout(r169Max / 3)}, true},
		{"lease 3s store timeout 1s", nil, []idempotency.Option{idempotency.Lease(3 * time.Second), idempotency.StoreTimeout(time.Second)}, true},
		{"store timeout max/3 lease max ttl max", nil, []idempotency.Option{idempotency.Lease(r169Max), idempotency.StoreTimeout(r169Max / 3), idempotency.TTL(r169Max)}, true},
		{"fail open min", nil, []idempotency.Option{idempotency.FailOpenAfter(math.MinInt64)}, true},
		{"fail open max", nil, []idempotency.Option{idempotency.FailOpenAfter(r169Max)}, true},
		{"fail open 0", nil, []idempotency.Option{idempotency.FailOpenAfter(0)}, true},
		{"max response maxint", nil, []idempotency.Option{idempotency.MaxResponse(math.MaxInt)}, true},
		{"max response 1", nil, []idempotency.Option{idempotency.MaxResponse(1)}, true}, // body "ok" is 2 bytes: not replayable, see below
		{"max body maxint64", nil, []idempotency.Option{idempotency.MaxBody(math.MaxInt64)}, true},
		{"max body 1", nil, []idempotency.Option{idempotency.MaxBody(1)}, true},
		{"memory store maxint64", func() idempotency.Store { return idempotency.NewMemoryStore(math.MaxInt64) }, nil, true},
		// review169 found NewMemoryStore(1) to (255) accepted, then every
		// request refused; below MinMemoryBytes it now panics (below).
		{"memory store min", func() idempotency.Store { return idempotency.NewMemoryStore(idempotency.MinMemoryBytes) }, nil, true},
		{"release status none", nil, []idempotency.Option{idempotency.ReleaseStatus()}, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var store idempotency.Store = idempotency.NewMemoryStore(0)
			if tc.store != nil {
				store = tc.store()
			}
			var ran atomic.Int64
			h := idempotency.Middleware(store, append([]idempotency.Option{idempotency.SharedKeys()}, tc.opts...)...)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				ran.Add(1)
				w.Write([]byte("ok"))
			}))
			done := make(chan struct{})
			var codes []int
			var bodies []string
			go func() {
				defer close(done)
				for range 2 {
					req := httptest.NewRequest(http.MethodPost, "/x", strings.NewReader("b"))
					req.Header.Set(idempotency.Header, "key-169")
					rec := httptest.NewRecorder()
					h.ServeHTTP(rec, req)
					codes = append(codes, rec.Code)
					bodies = append(bodies, rec.Body.String())
				}
			}()
			select {
			case <-done:
			case <-time.After(5 * time.Second):
				t.Fatal("two requests to a healthy handler did not end in 5 s")
			}
			t.Logf("codes %v bodies %q ran %d", codes, bodies, ran.Load())
			first := codes[0]
			if first != http.StatusOK || bodies[0] != "ok" {
				t.Fatalf("first request to a healthy handler: %d %q", first, bodies[0])
			}
			if ran.Load() != 1 && tc.name != "memory store 1 byte" {
				t.Fatalf("handler ran %d times for one key", ran.Load())
			}
			if tc.name == "max response 1" {
				if codes[1] != http.StatusInternalServerError {
					t.Fatalf("repeat of a response over MaxResponse: %d, doc says 500", codes[1])
				}
				return
			}
			if tc.name == "memory store 1 byte" {
				return // a store too small to hold a record: see the log
			}
			if codes[1] != http.StatusOK || bodies[1] != "ok" {
				t.Fatalf("repeat: %d %q, want the replay", codes[1], bodies[1])
			}
		})
	}
}

// TestReview169ConstructorPanics: the option values the docs call invalid
// panic at construction, naming the package; Lease/StoreTimeout near
// MaxInt64 do not overflow the "lease under three store timeouts" check.
func TestReview169ConstructorPanics(t *testing.T) {
	mk := func(opts ...idempotency.Option) func() {
		return func() {
			idempotency.Middleware(idempotency.NewMemoryStore(0), append([]idempotency.Option{idempotency.SharedKeys()}, opts...)...)
		}
	}
	cases := []struct {
		name   string
		panics bool
		f      func()
	}{
		{"TTL(0)", true, func() { idempotency.TTL(0) }},
		{"TTL(-1)", true, func() { idempotency.TTL(-1) }},
		{"Lease(0)", true, func() { idempotency.Lease(0) }},
		{"StoreTimeout(0)", true, func() { idempotency.StoreTimeout(0) }},
		{"MaxResponse(0)", true, func() { idempotency.MaxResponse(0) }},
		{"MaxResponse(MinInt)", true, func() { idempotency.MaxResponse(math.MinInt) }},
		{"MaxBody(0)", true, func() { idempotency.MaxBody(0) }},
		{"NewMemoryStore(-1)", true, func() { idempotency.NewMemoryStore(-1) }},
		{"NewMemoryStore(1)", true, func() { idempotency.NewMemoryStore(1) }},
		{"NewMemoryStore(MinMemoryBytes-1)", true, func() { idempotency.NewMemoryStore(idempotency.MinMemoryBytes - 1) }},
		{"NewMemoryStore(MinMemoryBytes)", false, func() { idempotency.NewMemoryStore(idempotency.MinMemoryBytes) }},
		{"Lease(max) StoreTimeout(max)", true, mk(idempotency.Lease(r169Max), idempotency.StoreTimeout(r169Max))},
		{"Lease(max) StoreTimeout(max/3+1)", true, mk(idempotency.Lease(r169Max), idempotency.StoreTimeout(r169Max/3+1))},
		{"Lease(max) StoreTimeout(max/3)", false, mk(idempotency.Lease(r169Max), idempotency.StoreTimeout(r169Max/3))},
		{"Lease(3ns) StoreTimeout(1ns)", false, mk(idempotency.Lease(3), idempotency.StoreTimeout(1))},
		{"Lease(2ns) StoreTimeout(1ns)", true, mk(idempotency.Lease(2), idempotency.StoreTimeout(1))},
		{"Lease(1s) default StoreTimeout", true, mk(idempotency.Lease(time.Second))},
		{"Lease(1.5s) default StoreTimeout", false, mk(idempotency.Lease(1500 * time.Millisecond))},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var got any
			func() {
				defer func() { got = recover() }()
				tc.f()
			}()
			if (got != nil) != tc.panics {
				t.Fatalf("%s: panic %v, want panic %v", tc.name, got, tc.panics)
			}
			if got != nil && !strings.HasPrefix(fmt.Sprint(got), "idempotency:") {
				t.Fatalf("panic message %q does not name the package", got)
			}
		})
	}
}

// TestReview169ShortLeaseRealTime: the shortest accepted lease for a
// store timeout (3x), a healthy memory store and a handler running 10
// leases: it runs once, answers 200, and its repeat is replayed.
func TestReview169ShortLeaseRealTime(t *testing.T) {
	for _, st := range []time.Duration{time.Millisecond, 5 * time.Millisecond} {
		t.Run(st.String(), func(t *testing.T) {
			var ran atomic.Int64
			store := idempotency.NewMemoryStore(0)
			h := idempotency.Middleware(store, idempotency.SharedKeys(), idempotency.Lease(3*st), idempotency.StoreTimeout(st))(
				http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					ran.Add(1)
					select {
					case <-time.After(30 * st):
					case <-r.Context().Done():
						http.Error(w, "canceled: "+context.Cause(r.Context()).Error(), http.StatusServiceUnavailable)
						return
					}
					w.Write([]byte("ok"))
				}))
			bad := 0
			const n = 20
			for i := range n {
				key := fmt.Sprintf("k%d", i)
				var codes []int
				for range 2 {
					req := httptest.NewRequest(http.MethodPost, "/x", strings.NewReader("b"))
					req.Header.Set(idempotency.Header, key)
					rec := httptest.NewRecorder()
					h.ServeHTTP(rec, req)
					codes = append(codes, rec.Code)
				}
				if codes[0] != 200 || codes[1] != 200 {
					bad++
					t.Logf("key %d: codes %v", i, codes)
				}
			}
			if bad > 0 || ran.Load() != n {
				t.Fatalf("lease %v store timeout %v: %d of %d keys not served once and replayed; handler ran %d times", 3*st, st, bad, n, ran.Load())
			}
		})
	}
}
