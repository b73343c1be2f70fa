package httpclient_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/hedge"
	"github.com/resiliencekit/resiliencekit/httpclient"
	"github.com/resiliencekit/resiliencekit/idempotency"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

// r74Server runs h behind idempotency.Middleware on a memory store; runs
// counts the handler's runs per key.
func r74Server(t *testing.T, h http.HandlerFunc) (*httptest.Server, *sync.Map) {
	runs := &sync.Map{}
	mw := idempotency.Middleware(idempotency.NewMemoryStore(0), idempotency.SharedKeys(),
		idempotency.WithLogger(slog.New(slog.DiscardHandler)))
	srv := httptest.NewServer(mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		k := r.Header.Get("Idempotency-Key")
		v, _ := runs.LoadOrStore(k, new(atomic.Int64))
		v.(*atomic.Int64).Add(1)
		h(w, r)
	})))
	t.Cleanup(srv.Close)
	return srv, runs
}

func r74Runs(m *sync.Map, key string) int64 {
	v, ok := m.Load(key)
	if !ok {
		return 0
	}
	return v.(*atomic.Int64).Load()
}

// An attempt times out after the server began the handler; the retry must
// get 409 then the replay: one run, the client gets the 201.
func TestReview74AttemptTimeoutThenReplay(t *testing.T) {
	srv, runs := r74Server(t, func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(300 * time.Millisecond) // ignores its context: commits
		w.WriteHeader(201)
		io.WriteString(w, `{"id":1}`)
	})
	p := pipeline.New(pipeline.WithAttemptTimeout(100*time.Millisecond),
		pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(5), retrypolicy.BaseDelay(50*time.Millisecond), retrypolicy.MaxDelay(2*time.Second))))
	c := httpclient.New(httpclient.WithPipeline(p))
	var out map[string]any
	start := time.Now()
	err := c.PostJSON(context.Background(), srv.URL+"/orders", map[string]int{"a": 1}, &out, httpclient.IdempotencyKey("k-timeout"))
	t.Logf("err=%v out=%v took=%v runs=%d", err, out, time.Since(start), r74Runs(runs, "k-timeout"))
	if err != nil {
		t.Fatalf("want the replayed 201, got %v", err)
	}
	if n := r74Runs(runs, "k-timeout"); n != 1 {
		t.Fatalf("runs = %d, want 1", n)
	}
}

// Hedged keyed POSTs: the hedge gets 409; one run, the client gets 201,
// and the breaker is not tripped by the hedge's 409s.
func TestReview74HedgedKeyedPost(t *testing.T) {
	srv, runs := r74Server(t, func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(150 * time.Millisecond)
		w.WriteHeader(201)
		io.WriteString(w, `{}`)
	})
	b := breaker.New("r74", breaker.ConsecutiveFailures(3))
	p := pipeline.New(pipeline.WithBreaker(b),
		pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(4), retrypolicy.BaseDelay(20*time.Millisecond))),
		pipeline.WithHedging(hedge.New(hedge.Delay(30*time.Millisecond), hedge.MaxShare(1), hedge.MaxExtra(2))))
	c := httpclient.New(httpclient.WithPipeline(p))
	var wg sync.WaitGroup
	var fails atomic.Int64
	for i := range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := fmt.Sprintf("h-%d", i)
			if err := c.PostJSON(context.Background(), srv.URL+"/h", map[string]int{"i": i}, nil, httpclient.IdempotencyKey(key)); err != nil {
				fails.Add(1)
				t.Logf("%s: %v", key, err)
			}
		}()
	}
	wg.Wait()
	for i := range 20 {
		if n := r74Runs(runs, fmt.Sprintf("h-%d", i)); n != 1 {
			t.Errorf("key h-%d ran %d times", i, n)
		}
	}
	t.Logf("breaker %v counts %+v", b.State(), b.Counts())
	if fails.Load() > 0 {
		t.Errorf("%d of 20 hedged keyed POSTs failed", fails.Load())
	}
}

// A handler that answers 307 to another route of the same server (an API
// moved): a plain client completes the POST; with a key, the follow-up
// carries the key to another path, and the server answers 422.
func TestReview74RedirectWithKey(t *testing.T) {
	for _, code := range []int{307, 308} {
		t.Run(fmt.Sprint(code), func(t *testing.T) {
			var created atomic.Int64
			srv, _ := r74Server(t, func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path == "/old" {
					http.Redirect(w, r, "/new", code)
					return
				}
				created.Add(1)
				w.WriteHeader(201)
			})
			c := httpclient.New()
			errPlain := c.PostJSON(context.Background(), srv.URL+"/old", map[string]int{"a": 1}, nil)
			errKey := c.PostJSON(context.Background(), srv.URL+"/old", map[string]int{"a": 1}, nil, httpclient.IdempotencyKey("redir-"+fmt.Sprint(code)))
			t.Logf("plain: %v; keyed: %v", errPlain, errKey)
			if errPlain != nil {
				t.Fatalf("plain: %v", errPlain)
			}
			if errKey != nil {
				t.Errorf("keyed POST through a %d on the same server failed where a plain one completed: %v", code, errKey)
			}
			// The caller retries the whole call with its key: the hops replay.
			again := c.PostJSON(context.Background(), srv.URL+"/old", map[string]int{"a": 1}, nil, httpclient.IdempotencyKey("redir-"+fmt.Sprint(code)))
			if again != nil || created.Load() != 2 {
				t.Errorf("the keyed call again: %v, and /new ran %d times in all (1 plain, 1 keyed)", again, created.Load())
			}
		})
	}
}

// A POST without a key is never retried: 503, reset, timeout.
func TestReview74NoKeyNeverRetried(t *testing.T) {
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		switch r.URL.Path {
		case "/503":
			w.Header().Set("Retry-After", "0")
			w.WriteHeader(503)
		case "/reset":
			hj, _, _ := w.(http.Hijacker).Hijack()
			hj.Close()
		case "/slow":
			time.Sleep(200 * time.Millisecond)
		}
	}))
	defer srv.Close()
	p := pipeline.New(pipeline.WithAttemptTimeout(50*time.Millisecond),
		pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(4), retrypolicy.BaseDelay(time.Millisecond))))
	c := httpclient.New(httpclient.WithPipeline(p))
	for _, path := range []string{"/503", "/reset", "/slow"} {
		for _, method := range []string{"POST", "PATCH"} {
			n.Store(0)
			req, _ := http.NewRequest(method, srv.URL+path, strings.NewReader("x"))
			hc := &http.Client{Transport: httpclient.NewTransport(httpclient.WithPipeline(p))}
			resp, err := hc.Do(req)
			if resp != nil {
				resp.Body.Close()
			}
			time.Sleep(250 * time.Millisecond)
			if n.Load() != 1 {
				t.Errorf("%s %s without a key: %d attempts (err %v)", method, path, n.Load(), err)
			}
		}
		n.Store(0)
		_ = c.PostJSON(context.Background(), srv.URL+path, 1, nil)
		time.Sleep(250 * time.Millisecond)
		if n.Load() != 1 {
			t.Errorf("PostJSON %s without a key: %d attempts", path, n.Load())
		}
	}
}

// A 409 in progress with Retry-After: retried, after it, within the
// budget; the call completes once the first run ends.
func TestReview74InProgressRetriedAfterRetryAfter(t *testing.T) {
	srv, runs := r74Server(t, func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(1500 * time.Millisecond)
		w.WriteHeader(201)
	})
	// first: a plain keyed POST that starts the run
	go func() {
		req, _ := http.NewRequest("POST", srv.URL+"/x", strings.NewReader("b"))
		req.Header.Set("Idempotency-Key", "ip")
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
		}
	}()
	time.Sleep(100 * time.Millisecond)
	b := breaker.New("r74ip", breaker.ConsecutiveFailures(1))
	p := pipeline.New(pipeline.WithBreaker(b), pipeline.WithTimeBudget(5*time.Second),
		pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(4), retrypolicy.BaseDelay(10*time.Millisecond), retrypolicy.MaxDelay(3*time.Second))))
	c := httpclient.New(httpclient.WithPipeline(p))
	start := time.Now()
	err := c.PostJSON(context.Background(), srv.URL+"/x", nil, nil, httpclient.IdempotencyKey("ip"))
	// body differs: PostJSON with nil in sends no body; the first sent "b": 422 expected? use same body
	t.Logf("err=%v took %v runs=%d breaker=%v", err, time.Since(start), r74Runs(runs, "ip"), b.State())
}

// The same, with the same body: 409 with Retry-After 1 is retried after it.
func TestReview74InProgressSameBody(t *testing.T) {
	srv, runs := r74Server(t, func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(1500 * time.Millisecond)
		w.WriteHeader(201)
		io.WriteString(w, `{"ok":true}`)
	})
	go func() {
		req, _ := http.NewRequest("POST", srv.URL+"/x", strings.NewReader(`{"a":1}`))
		req.Header.Set("Idempotency-Key", "ip2")
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
		}
	}()
	time.Sleep(100 * time.Millisecond)
	b := breaker.New("r74ip2", breaker.ConsecutiveFailures(1))
	p := pipeline.New(pipeline.WithBreaker(b), pipeline.WithTimeBudget(5*time.Second),
		pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(4), retrypolicy.BaseDelay(10*time.Millisecond), retrypolicy.MaxDelay(3*time.Second))))
	c := httpclient.New(httpclient.WithPipeline(p))
	start := time.Now()
	var out map[string]any
	err := c.PostJSON(context.Background(), srv.URL+"/x", map[string]int{"a": 1}, &out, httpclient.IdempotencyKey("ip2"))
	took := time.Since(start)
	t.Logf("err=%v out=%v took %v runs=%d breaker=%v %+v", err, out, took, r74Runs(runs, "ip2"), b.State(), b.Counts())
	if err != nil || r74Runs(runs, "ip2") != 1 {
		t.Fatalf("want one run and the replay")
	}
	if took < 900*time.Millisecond {
		t.Errorf("Retry-After 1 not honoured: %v", took)
	}
}

// A caller's GetBody that gives a different body each time (a streaming
// body regenerated): the retry has another fingerprint: 422.
func TestReview74BodyDiffersBetweenAttempts(t *testing.T) {
	var first atomic.Bool
	srv, runs := r74Server(t, func(w http.ResponseWriter, r *http.Request) {
		if first.CompareAndSwap(false, true) {
			w.Header().Set("Retry-After", "0")
			w.WriteHeader(503) // released: retry runs again
			return
		}
		w.WriteHeader(201)
	})
	var i atomic.Int64
	req, _ := http.NewRequest("POST", srv.URL+"/b", strings.NewReader("v0"))
	req.GetBody = func() (io.ReadCloser, error) {
		return io.NopCloser(strings.NewReader(fmt.Sprintf("v%d", i.Add(1)))), nil
	}
	req.Header.Set("Idempotency-Key", "body")
	hc := &http.Client{Transport: httpclient.NewTransport()}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	t.Logf("status %d runs %d", resp.StatusCode, r74Runs(runs, "body"))
}

// A streaming body (no GetBody) over MaxBufferedBody with a key: sent once;
// under it: buffered, retried with the same bytes; one run.
func TestReview74StreamingBodyKeyed(t *testing.T) {
	var first atomic.Bool
	var got [][]byte
	var mu sync.Mutex
	srv, runs := r74Server(t, func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		got = append(got, b)
		mu.Unlock()
		if first.CompareAndSwap(false, true) {
			hj, _, _ := w.(http.Hijacker).Hijack()
			hj.Close() // the answer lost after the handler committed
			return
		}
		w.WriteHeader(201)
	})
	payload := bytes.Repeat([]byte("z"), 100<<10)
	hc := &http.Client{Transport: httpclient.NewTransport(httpclient.WithPipeline(pipeline.New(pipeline.WithRetry(retrypolicy.New(retrypolicy.BaseDelay(time.Millisecond))))))}
	req, _ := http.NewRequest("POST", srv.URL+"/s", io.MultiReader(bytes.NewReader(payload)))
	req.Header.Set("Idempotency-Key", "stream")
	resp, err := hc.Do(req)
	if resp != nil {
		resp.Body.Close()
	}
	t.Logf("err=%v status=%v runs=%d", err, statusOf(resp), r74Runs(runs, "stream"))
	// a hijacked connection is stored as truncated ("not replayable"): the retry gets 500
}

func statusOf(r *http.Response) int {
	if r == nil {
		return 0
	}
	return r.StatusCode
}

// Key reused across URL, method, body: 422, permanent, not retried.
func TestReview74KeyReused(t *testing.T) {
	srv, runs := r74Server(t, func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(201) })
	var attempts atomic.Int64
	c := httpclient.New()
	_ = c.PostJSON(context.Background(), srv.URL+"/a", 1, nil, httpclient.IdempotencyKey("reuse"))
	for _, tc := range []struct{ method, path, body string }{{"POST", "/b", "1"}, {"POST", "/a", "2"}, {"POST", "/a?x=1", "1"}} {
		req, _ := http.NewRequest(tc.method, srv.URL+tc.path, strings.NewReader(tc.body))
		req.Header.Set("Idempotency-Key", "reuse")
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json")
		hc := &http.Client{Transport: httpclient.NewTransport()}
		resp, err := hc.Do(req)
		attempts.Add(1)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 422 {
			t.Errorf("%s %s body %s: %d, want 422", tc.method, tc.path, tc.body, resp.StatusCode)
		}
	}
	if n := r74Runs(runs, "reuse"); n != 1 {
		t.Errorf("runs %d", n)
	}
}

// 429/503 with Retry-After on a keyed POST: the key is freed, the retry
// runs after Retry-After; one commit.
func TestReview74RetryAfterOnKeyedPost(t *testing.T) {
	for _, code := range []int{429, 503} {
		var n atomic.Int64
		srv, runs := r74Server(t, func(w http.ResponseWriter, r *http.Request) {
			if n.Add(1) == 1 {
				w.Header().Set("Retry-After", "1")
				w.WriteHeader(code)
				return
			}
			w.WriteHeader(201)
		})
		c := httpclient.New()
		start := time.Now()
		key := fmt.Sprint("ra", code)
		err := c.PostJSON(context.Background(), srv.URL+"/r", 1, nil, httpclient.IdempotencyKey(key))
		took := time.Since(start)
		if err != nil || took < 900*time.Millisecond || r74Runs(runs, key) != 2 {
			t.Errorf("%d: err %v took %v runs %d", code, err, took, r74Runs(runs, key))
		}
	}
}

// The client cancels mid-request; a new call with the same key later gets
// the replay (handler ignores ctx) or a fresh run (handler answers 503).
func TestReview74ClientCancelsMidRequest(t *testing.T) {
	srv, runs := r74Server(t, func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(200 * time.Millisecond)
		if r.URL.Path == "/aware" && r.Context().Err() != nil {
			w.WriteHeader(503)
			return
		}
		w.WriteHeader(201)
	})
	c := httpclient.New()
	for _, path := range []string{"/ignores", "/aware"} {
		key := "cancel" + path
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		err := c.PostJSON(ctx, srv.URL+path, 1, nil, httpclient.IdempotencyKey(key))
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("%s: %v", path, err)
		}
		time.Sleep(400 * time.Millisecond)
		err = c.PostJSON(context.Background(), srv.URL+path, 1, nil, httpclient.IdempotencyKey(key))
		t.Logf("%s: second call %v runs %d", path, err, r74Runs(runs, key))
		if err != nil {
			t.Errorf("%s: second call failed: %v", path, err)
		}
	}
}

// AutoIdempotencyKey through a 307: each hop gets its own key: completes.
func TestReview74RedirectAutoKey(t *testing.T) {
	srv, _ := r74Server(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/old" {
			http.Redirect(w, r, "/new", 307)
			return
		}
		w.WriteHeader(201)
	})
	c := httpclient.New(httpclient.AutoIdempotencyKey())
	if err := c.PostJSON(context.Background(), srv.URL+"/old", 1, nil); err != nil {
		t.Errorf("auto key through 307: %v", err)
	}
}

// Many clients, one key, attempt timeouts shorter than the handler: one
// run, every caller gets the 201.
func TestReview74StressOneKey(t *testing.T) {
	srv, runs := r74Server(t, func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(300 * time.Millisecond)
		w.WriteHeader(201)
		io.WriteString(w, `{"ok":1}`)
	})
	p := pipeline.New(pipeline.WithAttemptTimeout(100*time.Millisecond), pipeline.WithTimeBudget(10*time.Second),
		pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(6), retrypolicy.BaseDelay(20*time.Millisecond), retrypolicy.MaxDelay(2*time.Second))),
		pipeline.WithHedging(hedge.New(hedge.Delay(40*time.Millisecond), hedge.MaxShare(1))))
	c := httpclient.New(httpclient.WithPipeline(p))
	var wg sync.WaitGroup
	var fails atomic.Int64
	for range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var out map[string]any
			if err := c.PostJSON(context.Background(), srv.URL+"/s", map[string]int{"a": 1}, &out, httpclient.IdempotencyKey("stress")); err != nil {
				fails.Add(1)
				t.Log(err)
			}
		}()
	}
	wg.Wait()
	if n := r74Runs(runs, "stress"); n != 1 || fails.Load() != 0 {
		t.Errorf("runs %d fails %d of 50", n, fails.Load())
	}
}

// A handler that redirects to its canonical host (same path, same store):
// the follow-up with the key is a repeat with the same fingerprint, and is
// answered with the stored 307 again: a loop, where a plain client completes.
func TestReview74RedirectSamePathLoops(t *testing.T) {
	var srvURL string
	srv, runs := r74Server(t, func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.Host, "127.0.0.1") {
			http.Redirect(w, r, strings.Replace(srvURL, "127.0.0.1", "localhost", 1)+r.URL.Path, 307)
			return
		}
		w.WriteHeader(201)
	})
	srvURL = srv.URL
	c := httpclient.New()
	errPlain := c.PostJSON(context.Background(), srv.URL+"/o", 1, nil)
	errKey := c.PostJSON(context.Background(), srv.URL+"/o", 1, nil, httpclient.IdempotencyKey("canon"))
	t.Logf("plain %v; keyed %v; runs %d", errPlain, errKey, r74Runs(runs, "canon"))
	if errPlain == nil && errKey != nil {
		t.Errorf("keyed POST failed where a plain one completed: %v", errKey)
	}
}
