package idempotency_test

import (
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/goleak"

	"github.com/resiliencekit/resiliencekit/idempotency"
)

// Options at their extremes: a lease of MaxInt64, a store timeout of a
// third of it, a TTL of MaxInt64. A request runs once, its repeat is
// replayed, a panic before any write frees the key, a 503 frees it, a
// handler slower than a "normal" lease keeps it.
func TestReview149ExtremeDurations(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := &review149Store{MemoryStore: idempotency.NewMemoryStore(0)}
		var runs sync.Map
		var mode sync.Map // key -> "panic" | "503" | "slow"
		mw := idempotency.Middleware(store, idempotency.SharedKeys(), idempotency.WithLogger(review149Quiet),
			idempotency.Lease(math.MaxInt64), idempotency.StoreTimeout(math.MaxInt64/3), idempotency.TTL(math.MaxInt64),
			idempotency.FailOpenAfter(math.MaxInt64))
		h := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			k := r.Header.Get(idempotency.Header)
			v, _ := runs.LoadOrStore(k, new(atomic.Int32))
			n := v.(*atomic.Int32).Add(1)
			m, _ := mode.Load(k)
			switch {
			case m == "panic" && n == 1:
				panic("boom")
			case m == "503" && n == 1:
				w.WriteHeader(http.StatusServiceUnavailable)
				return
			case m == "slow":
				time.Sleep(time.Hour)
			}
			w.WriteHeader(http.StatusCreated)
			io.WriteString(w, "ok "+k)
		}))
		do := func(key string) *httptest.ResponseRecorder {
			defer func() { _ = recover() }()
			return review149Do(h, key)
		}
		if w := do("a"); w.Code != http.StatusCreated {
			t.Fatalf("a: %d", w.Code)
		}
		if w := do("a"); w.Code != http.StatusCreated || w.Header().Get(idempotency.ReplayedHeader) != "true" {
			t.Errorf("a's repeat: %d replayed=%q", w.Code, w.Header().Get(idempotency.ReplayedHeader))
		}
		mode.Store("p", "panic")
		do("p")
		if w := do("p"); w.Code != http.StatusCreated {
			t.Errorf("p after a panic before any write: %d, want the key freed and a run", w.Code)
		}
		mode.Store("u", "503")
		do("u")
		if w := do("u"); w.Code != http.StatusCreated {
			t.Errorf("u after a 503: %d, want the key freed and a run", w.Code)
		}
		mode.Store("s", "slow")
		go do("s")
		time.Sleep(59 * time.Minute)
		if w := do("s"); w.Code != http.StatusConflict {
			t.Errorf("s while its first run holds it: %d, want 409", w.Code)
		}
		time.Sleep(2 * time.Minute)
		if w := do("s"); w.Code != http.StatusCreated || w.Header().Get(idempotency.ReplayedHeader) != "true" {
			t.Errorf("s after its first run: %d replayed=%q", w.Code, w.Header().Get(idempotency.ReplayedHeader))
		}
		for _, k := range []string{"a", "p", "u", "s"} {
			want := int32(1)
			if k == "p" || k == "u" {
				want = 2
			}
			if got := review149Count(&runs, k); got != want {
				t.Errorf("%s ran %d times, want %d", k, got, want)
			}
		}
	})
}

// Nothing is left running after requests of every kind end: returned,
// panicked, Goexit, abandoned, 503, client gone, repeats and conflicts,
// on a store that is not the memory store (so with local records too), a
// handler that took WithLeaseDeadline and canceled it.
func TestReview149NoGoroutineLeftAfterRequests(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	store := &review149Store{MemoryStore: idempotency.NewMemoryStore(0)}
	mw := idempotency.Middleware(store, idempotency.SharedKeys(), idempotency.WithLogger(review149Quiet),
		idempotency.Lease(300*time.Millisecond), idempotency.StoreTimeout(50*time.Millisecond))
	h := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c := idempotency.FromContext(r.Context())
		ctx, cancel := c.WithLeaseDeadline(r.Context())
		defer cancel()
		_ = ctx
		switch k := r.Header.Get(idempotency.Header); {
		case strings.HasPrefix(k, "panic"):
			panic(http.ErrAbortHandler)
		case strings.HasPrefix(k, "goexit"):
			runtime.Goexit()
		case strings.HasPrefix(k, "abandon"):
			c.Abandon()
			w.WriteHeader(http.StatusInternalServerError)
		case strings.HasPrefix(k, "slow"):
			select {
			case <-time.After(400 * time.Millisecond):
			case <-r.Context().Done():
			}
			w.WriteHeader(http.StatusCreated)
		default:
			w.WriteHeader(http.StatusCreated)
		}
	}))
	ts := httptest.NewServer(h)
	var wg sync.WaitGroup
	for i := range 40 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			kind := []string{"ok", "panic", "goexit", "abandon", "slow"}[i%5]
			key := fmt.Sprintf("%s-%d", kind, i%10)
			ctx, cancel := context.WithTimeout(context.Background(), time.Duration(50+i*10)*time.Millisecond)
			defer cancel()
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, ts.URL, strings.NewReader("x"))
			req.Header.Set(idempotency.Header, key)
			if resp, err := http.DefaultClient.Do(req); err == nil {
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		}()
	}
	wg.Wait()
	ts.Close()
	http.DefaultClient.CloseIdleConnections()
	time.Sleep(700 * time.Millisecond) // orphan reaping timers, if any, a lease on
}

// A body at MaxBody is taken, one byte over gets 413; a body refused by an
// outer http.MaxBytesHandler (a smaller server-wide limit) is the caller's
// error, answered as too large (413), not as unreadable.
func TestReview149BodyLimits(t *testing.T) {
	var runs atomic.Int32
	next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { runs.Add(1); w.WriteHeader(http.StatusCreated) })
	h := idempotency.Middleware(nil, idempotency.SharedKeys(), idempotency.MaxBody(10))(next)
	post := func(h http.Handler, key, body string) int {
		req := httptest.NewRequest(http.MethodPost, "/", strings.NewReader(body))
		req.Header.Set(idempotency.Header, key)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		return w.Code
	}
	if c := post(h, "k10", strings.Repeat("x", 10)); c != http.StatusCreated {
		t.Errorf("body of MaxBody: %d", c)
	}
	if c := post(h, "k11", strings.Repeat("x", 11)); c != http.StatusRequestEntityTooLarge {
		t.Errorf("body of MaxBody+1: %d", c)
	}
	if c := post(h, "k0", ""); c != http.StatusCreated {
		t.Errorf("empty body: %d", c)
	}
	outer := http.MaxBytesHandler(idempotency.Middleware(nil, idempotency.SharedKeys())(next), 5)
	if c := post(outer, "kx", strings.Repeat("x", 6)); c != http.StatusRequestEntityTooLarge {
		t.Errorf("a body over an outer MaxBytesHandler's limit: %d, want 413 (the caller's error, answered as such)", c)
	}
	for _, k := range []string{"", " ", strings.Repeat("k", 256), "a\x00b", "caf\xc3\xa9", `"unterminated`, `""`} {
		if c := post(h, k, "x"); c != http.StatusBadRequest {
			t.Errorf("key %q: %d, want 400", k, c)
		}
	}
	if c := post(h, strings.Repeat("k", 255), "x"); c != http.StatusCreated {
		t.Errorf("a key of 255: %d", c)
	}
}

// Many goroutines on two replicas of one store, one key, a handler three
// times slower than the lease: one run, every answer a 201 (run or
// replayed), a 409, never another status.
func TestReview149ManyGoroutinesTwoReplicasSlowHandler(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := &review149Store{MemoryStore: idempotency.NewMemoryStore(0)}
		var runs atomic.Int32
		next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			runs.Add(1)
			time.Sleep(3 * time.Second)
			w.WriteHeader(http.StatusCreated)
			io.WriteString(w, "done")
		})
		opts := []idempotency.Option{idempotency.SharedKeys(), idempotency.WithLogger(review149Quiet), idempotency.Lease(time.Second), idempotency.StoreTimeout(100 * time.Millisecond)}
		reps := []http.Handler{idempotency.Middleware(store, opts...)(next), idempotency.Middleware(store, opts...)(next)}
		var wg sync.WaitGroup
		var bad atomic.Int32
		for i := range 300 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				time.Sleep(time.Duration(i*13) * time.Millisecond)
				w := review149Do(reps[i%2], "one")
				if w.Code != http.StatusCreated && w.Code != http.StatusConflict {
					bad.Add(1)
					t.Logf("status %d: %s", w.Code, w.Body.String())
				}
			}()
		}
		wg.Wait()
		if runs.Load() != 1 || bad.Load() != 0 {
			t.Errorf("runs %d, other statuses %d", runs.Load(), bad.Load())
		}
		for i := range 2 {
			if w := review149Do(reps[i], "one"); w.Code != http.StatusCreated || w.Header().Get(idempotency.ReplayedHeader) != "true" {
				t.Errorf("replica %d after the run: %d", i, w.Code)
			}
		}
	})
}

// A handler that writes a status net/http refuses (over 999) panics in a
// plain server: nothing is sent, nothing is kept, and a retry runs again.
// Behind the middleware the status is held, the record saved with it, and
// only then net/http panics (in pass); every repeat then replays it, and
// panics, for the TTL.
func TestReview149InvalidStatusIsNotStoredForever(t *testing.T) {
	var runs atomic.Int32
	h := idempotency.Middleware(nil, idempotency.SharedKeys(), idempotency.WithLogger(review149Quiet))(
		http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if runs.Add(1) == 1 {
				w.WriteHeader(1000) // a bug, once
				return
			}
			w.WriteHeader(http.StatusCreated)
		}))
	do := func() (code int, panicked any) {
		defer func() { panicked = recover() }()
		w := review149Do(h, "k")
		return w.Code, nil
	}
	_, p1 := do()
	code, p2 := do()
	t.Logf("first: panic %v; repeat: %d, panic %v; runs %d", p1, code, p2, runs.Load())
	if p2 != nil {
		t.Errorf("the repeat panics replaying a stored status 1000 (and will for the TTL): %v", p2)
	}
}

// A response of exactly MaxResponse bytes is replayed; one byte over is
// sent whole the first time and refused (500, not replayable) after,
// never run again.
func TestReview149MaxResponseBoundary(t *testing.T) {
	var runs atomic.Int32
	h := idempotency.Middleware(nil, idempotency.SharedKeys(), idempotency.MaxResponse(3000))(
		http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			runs.Add(1)
			n := 3000
			if r.Header.Get(idempotency.Header) == "over" {
				n = 3001
			}
			w.WriteHeader(http.StatusCreated)
			io.WriteString(w, strings.Repeat("x", n))
		}))
	if w := review149Do(h, "at"); w.Code != 201 || w.Body.Len() != 3000 {
		t.Fatalf("at: %d %d", w.Code, w.Body.Len())
	}
	if w := review149Do(h, "at"); w.Code != 201 || w.Body.Len() != 3000 || w.Header().Get(idempotency.ReplayedHeader) != "true" {
		t.Errorf("at, repeat: %d %d", w.Code, w.Body.Len())
	}
	if w := review149Do(h, "over"); w.Code != 201 || w.Body.Len() != 3001 {
		t.Fatalf("over: %d %d", w.Code, w.Body.Len())
	}
	if w := review149Do(h, "over"); w.Code != http.StatusInternalServerError {
		t.Errorf("over, repeat: %d", w.Code)
	}
	if runs.Load() != 2 {
		t.Errorf("runs %d", runs.Load())
	}
}
