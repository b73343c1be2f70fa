package idempotencystore_test

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/resiliencekit/resiliencekit/idempotency"
	"github.com/resiliencekit/resiliencekit/redis/idempotencystore"
	"github.com/resiliencekit/resiliencekit/redis/redistest"
)

func r165Post(t *testing.T, url, key string, body []byte) (*http.Response, []byte, time.Duration) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	if key != "" {
		req.Header.Set(idempotency.Header, key)
	}
	start := time.Now()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("POST: %v", err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, b, time.Since(start)
}

// Do no harm: with Redis frozen, or killed, each new keyed request gets
// 503 with Retry-After within about a StoreTimeout, concurrently, and
// the handler does not run (FailOpenAfter not reached).
func TestReview165DownOrFrozenRedisRefusesWithinTheBound(t *testing.T) {
	const st = 200 * time.Millisecond
	for _, fault := range []string{"frozen", "killed"} {
		t.Run(fault, func(t *testing.T) {
			srv := redistest.Start(t)
			var ran atomic.Int32
			h := idempotency.Middleware(idempotencystore.New(r165Client(t, srv.Addr()), ""), idempotency.SharedKeys(),
				idempotency.StoreTimeout(st), idempotency.Lease(3*time.Second))(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				ran.Add(1)
				w.WriteHeader(201)
			}))
			ts := httptest.NewServer(h)
			defer ts.Close()
			if resp, _, _ := r165Post(t, ts.URL, "warm", nil); resp.StatusCode != 201 {
				t.Fatalf("warm-up: %d", resp.StatusCode)
			}
			ran.Store(0)
			if fault == "frozen" {
				srv.Freeze()
				defer srv.Thaw()
			} else {
				srv.Kill()
			}
			const n = 40
			var wg sync.WaitGroup
			var mu sync.Mutex
			var worst time.Duration
			codes := map[int]int{}
			for i := range n {
				wg.Go(func() {
					resp, _, took := r165Post(t, ts.URL, fmt.Sprintf("k-%d", i), []byte("x"))
					mu.Lock()
					defer mu.Unlock()
					codes[resp.StatusCode]++
					worst = max(worst, took)
					if resp.StatusCode == 503 && resp.Header.Get("Retry-After") == "" {
						t.Errorf("503 without Retry-After")
					}
				})
			}
			wg.Wait()
			t.Logf("%s: codes %v, slowest %v", fault, codes, worst)
			if codes[503] != n {
				t.Errorf("codes %v, want %d × 503", codes, n)
			}
			if ran.Load() != 0 {
				t.Errorf("the handler ran %d times while the store was %s", ran.Load(), fault)
			}
			if worst > 2*st+300*time.Millisecond {
				t.Errorf("slowest refusal %v, StoreTimeout %v", worst, st)
			}
		})
	}
}

// Replays are faithful, through Redis: status, end-to-end headers (many
// values, in order; a Latin-1 byte), a binary body of exactly
// MaxResponse, an empty body.
func TestReview165ReplayIsFaithfulThroughRedis(t *testing.T) {
	srv := redistest.Start(t)
	big := make([]byte, 1<<20)
	for i := range big {
		big[i] = byte(i*7 + i>>8)
	}
	var ran atomic.Int32
	h := idempotency.Middleware(idempotencystore.New(r165Client(t, srv.Addr()), ""), idempotency.SharedKeys())(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ran.Add(1)
		switch r.URL.Path {
		case "/big":
			w.Header().Set("Content-Type", "application/octet-stream")
			w.Header()["X-Multi"] = []string{"b", "a", "", "c"}
			w.Header().Set("X-Latin", "caf\xe9.txt")
			w.Header().Set("ETag", `"v1"`)
			w.WriteHeader(201)
			_, _ = w.Write(big[:1000])
			_, _ = w.Write(big[1000:])
		case "/empty":
			w.Header().Set("Location", "/orders/1")
			w.WriteHeader(202)
		case "/odd":
			w.WriteHeader(299)
			_, _ = w.Write([]byte{0, 0xff, '\n', 0})
		}
	}))
	ts := httptest.NewServer(h)
	defer ts.Close()
	for _, path := range []string{"/big", "/empty", "/odd"} {
		r1, b1, _ := r165Post(t, ts.URL+path, "key"+path, []byte("payload"))
		r2, b2, _ := r165Post(t, ts.URL+path, "key"+path, []byte("payload"))
		if r2.Header.Get(idempotency.ReplayedHeader) != "true" {
			t.Errorf("%s: not a replay: %d %v", path, r2.StatusCode, r2.Header)
			continue
		}
		if r1.StatusCode != r2.StatusCode {
			t.Errorf("%s: status %d then %d", path, r1.StatusCode, r2.StatusCode)
		}
		if !bytes.Equal(b1, b2) {
			t.Errorf("%s: body of %d bytes then %d, equal %v", path, len(b1), len(b2), bytes.Equal(b1, b2))
		}
		for k, v1 := range r1.Header {
			if k == "Date" || k == "Content-Length" {
				continue
			}
			if v2 := r2.Header[k]; strings.Join(v1, "\x00") != strings.Join(v2, "\x00") {
				t.Errorf("%s: header %s %q then %q", path, k, v1, v2)
			}
		}
	}
	if ran.Load() != 3 {
		t.Errorf("%d runs for 3 keys", ran.Load())
	}
}

// Hostile keys: the store's separator, glob and hash-tag characters, the
// longest key, the quoted form with escapes. Distinct keys never
// collide, each key's Redis name stays under the store's prefix, and two
// stores' prefixes do not see each other's keys.
func TestReview165HostileKeysStayInTheirNamespace(t *testing.T) {
	srv := redistest.Start(t)
	c := r165Client(t, srv.Addr())
	var ran atomic.Int32
	mk := func(prefix string) *httptest.Server {
		h := idempotency.Middleware(idempotencystore.New(c, prefix), idempotency.Scope(func(r *http.Request) string { return r.Header.Get("X-Who") }))(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			ran.Add(1)
			_, _ = io.WriteString(w, r.Header.Get(idempotency.Header)+"|"+r.Header.Get("X-Who"))
		}))
		ts := httptest.NewServer(h)
		t.Cleanup(ts.Close)
		return ts
	}
	a, b := mk("svcA:"), mk("svcA:x") // one prefix a prefix of the other
	long := strings.Repeat(":", 255)
	keys := []string{"a", "a:", ":a", "{a}", "*", "?[a-z]*", long, long[:254] + "a", `"a\"b"`, `"a\\b"`, "a\"b", "idempotency:x", "resiliencekit-idempotency-probe"}
	post := func(ts *httptest.Server, who, key string) (int, string) {
		req, _ := http.NewRequest(http.MethodPost, ts.URL, strings.NewReader("same body"))
		req.Header.Set(idempotency.Header, key)
		req.Header.Set("X-Who", who)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	want := 0
	for _, ts := range []*httptest.Server{a, b} {
		for _, who := range []string{"alice", "alice:a", "bob"} {
			for _, k := range keys {
				code, body := post(ts, who, k)
				if code == 400 {
					continue // malformed: refused
				}
				want++
				if code != 200 || !strings.HasSuffix(body, "|"+who) {
					t.Errorf("who %q key %q: %d %q: another caller's or key's answer", who, k, code, body)
				}
				code2, body2 := post(ts, who, k)
				if code2 != code || body2 != body {
					t.Errorf("who %q key %q: repeat %d %q, first %d %q", who, k, code2, body2, code, body)
				}
			}
		}
	}
	if int(ran.Load()) != want {
		t.Errorf("%d runs for %d distinct (store, caller, key)", ran.Load(), want)
	}
	names, _ := c.Keys(t.Context(), "*").Result()
	for _, n := range names {
		if !strings.HasPrefix(n, "svcA:") {
			t.Errorf("a key outside the prefixes: %q", n)
		}
	}
}

// The store's faults are not the handler's: Redis killed or frozen while
// the handler runs, its 201 still reaches the client, within a
// StoreTimeout of its end, not turned into a 5xx.
func TestReview165StoreFaultAsTheHandlerRunsKeepsItsAnswer(t *testing.T) {
	const st = 200 * time.Millisecond
	const work = 400 * time.Millisecond
	for _, fault := range []string{"frozen", "killed"} {
		t.Run(fault, func(t *testing.T) {
			srv := redistest.Start(t)
			var ran atomic.Int32
			h := idempotency.Middleware(idempotencystore.New(r165Client(t, srv.Addr()), ""), idempotency.SharedKeys(),
				idempotency.StoreTimeout(st), idempotency.Lease(2*time.Second))(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.Header.Get(idempotency.Header) == "k" {
					ran.Add(1)
					time.Sleep(work)
				}
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(201)
				_, _ = io.WriteString(w, `{"order":1}`)
			}))
			ts := httptest.NewServer(h)
			defer ts.Close()
			r165Post(t, ts.URL, "warm", nil)
			var fell sync.WaitGroup
			fell.Go(func() {
				time.Sleep(100 * time.Millisecond)
				if fault == "frozen" {
					srv.Freeze()
				} else {
					srv.Kill()
				}
			})
			defer fell.Wait() // before the server's cleanup reads what Kill wrote
			if fault == "frozen" {
				defer srv.Thaw()
			}
			resp, body, took := r165Post(t, ts.URL, "k", []byte("x"))
			t.Logf("%s: %d %s after %v", fault, resp.StatusCode, body, took)
			if resp.StatusCode != 201 || string(body) != `{"order":1}` {
				t.Errorf("the handler's 201 became %d %q", resp.StatusCode, body)
			}
			if took > work+st+250*time.Millisecond {
				t.Errorf("answered after %v: the handler's %v and a StoreTimeout %v at most", took, work, st)
			}
		})
	}
}

// A key reused for another method, path, query or body is refused 422,
// on the replica that ran it and on another, while it runs and after;
// the handler runs once.
func TestReview165KeyReusedForAnotherRequestIs422(t *testing.T) {
	srv := redistest.Start(t)
	var ran atomic.Int32
	release := make(chan struct{})
	mk := func() *httptest.Server {
		h := idempotency.Middleware(idempotencystore.New(r165Client(t, srv.Addr()), ""), idempotency.SharedKeys())(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			ran.Add(1)
			<-release
			w.WriteHeader(201)
		}))
		ts := httptest.NewServer(h)
		t.Cleanup(ts.Close)
		return ts
	}
	a, b := mk(), mk()
	do := func(ts *httptest.Server, method, path, body string) int {
		req, _ := http.NewRequest(method, ts.URL+path, strings.NewReader(body))
		req.Header.Set(idempotency.Header, "k")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	first := make(chan int)
	go func() { first <- do(a, http.MethodPost, "/a", "one") }()
	for ran.Load() == 0 {
		time.Sleep(5 * time.Millisecond)
	}
	variants := []struct{ method, path, body string }{
		{http.MethodPatch, "/a", "one"}, {http.MethodPost, "/b", "one"}, {http.MethodPost, "/a?x=1", "one"},
		{http.MethodPost, "/a", "two"}, {http.MethodPost, "/a", ""}, {http.MethodPost, "/A", "one"},
	}
	for phase, inFlight := range []bool{true, false} {
		if !inFlight {
			close(release)
			if code := <-first; code != 201 {
				t.Fatalf("first: %d", code)
			}
		}
		for _, ts := range []*httptest.Server{a, b} {
			for _, v := range variants {
				if code := do(ts, v.method, v.path, v.body); code != 422 {
					t.Errorf("phase %d (in flight %v): %s %s %q: %d, want 422", phase, inFlight, v.method, v.path, v.body, code)
				}
			}
		}
	}
	if code := do(b, http.MethodPost, "/a", "one"); code != 201 {
		t.Errorf("the same request: %d, want the replayed 201", code)
	}
	if ran.Load() != 1 {
		t.Errorf("%d runs", ran.Load())
	}
}
