package idempotencystore_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"runtime"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/resiliencekit/resiliencekit/idempotency"
	"github.com/resiliencekit/resiliencekit/redis/idempotencystore"
	"github.com/resiliencekit/resiliencekit/redis/redistest"
)

// No goroutine outlives its bound: requests on a healthy Redis, then on
// one frozen and thawed, then killed; once the lease (1 s) and the
// store's own background time (2 s) have passed, the goroutines are back
// to what they were, and the client's pool holds no more connections
// than it is allowed idle.
func TestReview165NoGoroutineOrConnectionLeak(t *testing.T) {
	srv := redistest.Start(t)
	base := runtime.NumGoroutine()
	c := redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true})
	const st = 100 * time.Millisecond
	h := idempotency.Middleware(idempotencystore.New(c, ""), idempotency.SharedKeys(),
		idempotency.StoreTimeout(st), idempotency.Lease(time.Second))(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(20 * time.Millisecond)
		w.WriteHeader(201)
	}))
	ts := httptest.NewServer(h)
	tr := &http.Transport{}
	cl := &http.Client{Transport: tr}
	shoot := func(tag string, n int) {
		done := make(chan struct{}, n)
		for i := range n {
			go func() {
				defer func() { done <- struct{}{} }()
				req, _ := http.NewRequest(http.MethodPost, ts.URL, nil)
				req.Header.Set(idempotency.Header, fmt.Sprintf("%s-%d", tag, i%7))
				if resp, err := cl.Do(req); err == nil {
					resp.Body.Close()
				}
			}()
		}
		for range n {
			<-done
		}
	}
	shoot("ok", 40)
	srv.Freeze()
	go func() { time.Sleep(300 * time.Millisecond); srv.Thaw() }()
	shoot("frozen", 40)
	time.Sleep(400 * time.Millisecond)
	shoot("thawed", 40)
	t.Logf("pool after the faults: %+v", *c.PoolStats())
	srv.Kill()
	shoot("killed", 40)
	ts.Close()
	tr.CloseIdleConnections()
	_ = c.Close()
	deadline := time.Now().Add(4 * time.Second)
	for runtime.NumGoroutine() > base+2 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > base+2 {
		buf := make([]byte, 1<<20)
		buf = buf[:runtime.Stack(buf, true)]
		t.Errorf("%d goroutines 4 s after the last request, %d before:\n%s", n, base, buf)
	}
}
