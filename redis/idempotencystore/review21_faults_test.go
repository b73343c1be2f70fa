package idempotencystore_test

import (
	"context"
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

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/resiliencekit/resiliencekit/idempotency"
	"github.com/resiliencekit/resiliencekit/redis/idempotencystore"
	"github.com/resiliencekit/resiliencekit/redis/redistest"
	"github.com/resiliencekit/resiliencekit/resilience"
)

// r21events counts the guard's events by kind.
type r21events struct {
	mu    sync.Mutex
	kinds map[resilience.EventKind]int
}

func (e *r21events) OnEvent(ev resilience.Event) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.kinds == nil {
		e.kinds = map[resilience.EventKind]int{}
	}
	e.kinds[ev.Kind]++
}

func (e *r21events) count(k resilience.EventKind) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.kinds[k]
}

func r21post(t *testing.T, url, key string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(`{"sku":"a"}`))
	require.NoError(t, err)
	req.Header.Set(idempotency.Header, key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestReview21TransientErrorSkipsTheEvictionCheck: redis/idempotencystore
// reads the eviction policy on its first Begin: "while the server evicts,
// Begin fails with ErrEvictionPolicy, so requests get 503 ... rather than
// run unprotected. A server that refuses CONFIG ... is not checked". Any
// Redis error reply is taken as such a refusal and trusted for a minute:
// here a transient BUSY (a slow script elsewhere) at the first check, and
// then every claim for the next minute is taken on a server that evicts.
func TestReview21TransientErrorSkipsTheEvictionCheck(t *testing.T) {
	srv := redistest.Start(t, "--maxmemory", "64mb", "--maxmemory-policy", "allkeys-lru", "--busy-reply-threshold", "50")
	c := srv.Client()
	store := idempotencystore.New(c, "")
	ctx := context.Background()

	// Another client runs a slow script: the server answers BUSY meanwhile.
	other := redis.NewClient(&redis.Options{Addr: srv.Addr(), MaxRetries: -1})
	t.Cleanup(func() { _ = other.Close() })
	scriptDone := make(chan struct{})
	go func() {
		defer close(scriptDone)
		_ = other.Eval(ctx, `local i = 0 while true do i = i + 1 end`, nil).Err()
	}()
	require.Eventually(t, func() bool {
		err := c.Ping(ctx).Err()
		return err != nil && strings.Contains(err.Error(), "BUSY")
	}, 3*time.Second, 20*time.Millisecond)
	bctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	_, err := store.Begin(bctx, "k-busy", idempotency.Record{Fingerprint: "fp", Token: "t0"}, time.Minute)
	cancel()
	require.Error(t, err, "the busy server refuses the claim")
	t.Logf("during BUSY: %v", err)
	killer := redis.NewClient(&redis.Options{Addr: srv.Addr(), MaxRetries: -1})
	t.Cleanup(func() { _ = killer.Close() })
	require.NoError(t, killer.ScriptKill(ctx).Err())
	<-scriptDone

	// Now the server answers again, and it evicts.
	bctx, cancel = context.WithTimeout(ctx, 500*time.Millisecond)
	_, err = store.Begin(bctx, "k-after", idempotency.Record{Fingerprint: "fp", Token: "t1"}, time.Minute)
	cancel()
	assert.ErrorIs(t, err, idempotencystore.ErrEvictionPolicy, "a claim taken on a Redis that evicts (allkeys-lru), within the minute after one BUSY reply")
	// A fresh store on the same server refuses it, as documented.
	bctx, cancel = context.WithTimeout(ctx, 500*time.Millisecond)
	_, err = idempotencystore.New(c, "").Begin(bctx, "k-fresh", idempotency.Record{Fingerprint: "fp", Token: "t2"}, time.Minute)
	cancel()
	assert.ErrorIs(t, err, idempotencystore.ErrEvictionPolicy)
}

// TestReview21FrozenRedisFreshStoreManyAtOnce: a fresh store (its eviction
// check not yet read, under a mutex) and Redis frozen: 30 requests at once
// all get 503 within about a second.
func TestReview21FrozenRedisFreshStoreManyAtOnce(t *testing.T) {
	srv := redistest.Start(t)
	mw := idempotency.Middleware(idempotencystore.New(srv.Client(), ""), idempotency.SharedKeys(), idempotency.WithLogger(slog.New(slog.DiscardHandler)))
	ts := httptest.NewServer(mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusCreated) })))
	defer ts.Close()
	srv.Freeze()
	defer srv.Thaw()
	var wg sync.WaitGroup
	var mu sync.Mutex
	var worst time.Duration
	codes := map[int]int{}
	for i := range 30 {
		wg.Go(func() {
			start := time.Now()
			code, _ := r21post(t, ts.URL, fmt.Sprintf("fz-%d", i))
			mu.Lock()
			codes[code]++
			worst = max(worst, time.Since(start))
			mu.Unlock()
		})
	}
	wg.Wait()
	t.Logf("codes %v slowest %v", codes, worst.Round(time.Millisecond))
	assert.Equal(t, 30, codes[http.StatusServiceUnavailable])
	assert.Less(t, worst, 1500*time.Millisecond)
}

// TestReview21HugeLeaseAndTTLOnRedis: Lease and TTL of math.MaxInt64 on a
// real Redis: claimed, saved, replayed.
func TestReview21HugeLeaseAndTTLOnRedis(t *testing.T) {
	srv := redistest.Start(t)
	var runs atomic.Int32
	mw := idempotency.Middleware(idempotencystore.New(srv.Client(), ""), idempotency.SharedKeys(),
		idempotency.Lease(1<<63-1), idempotency.TTL(1<<63-1), idempotency.WithLogger(slog.New(slog.DiscardHandler)))
	ts := httptest.NewServer(mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		w.WriteHeader(http.StatusCreated)
	})))
	defer ts.Close()
	code, body := r21post(t, ts.URL, "huge")
	require.Equal(t, http.StatusCreated, code, body)
	code, body = r21post(t, ts.URL, "huge")
	assert.Equal(t, http.StatusCreated, code, body)
	assert.EqualValues(t, 1, runs.Load())
}

// TestReview21SlowReplyLocksTheKeyOnOtherReplicas: one slow answer from
// Redis (a round trip just over StoreTimeout) gets the request a 503, as
// documented; but the claim landed, and the replica that gave up does not
// free it: a retry of the key that the load balancer sends to another
// replica gets 409 "in progress" for a whole lease (30 s by default), though
// nothing runs anywhere. A plain server would have run it at once.
func TestReview21SlowReplyLocksTheKeyOnOtherReplicas(t *testing.T) {
	srv := redistest.Start(t)
	proxy := redistest.NewProxy(t, srv.Addr())
	slowClient := redis.NewClient(&redis.Options{Addr: proxy.Addr(), ContextTimeoutEnabled: true, MaxRetries: -1})
	t.Cleanup(func() { _ = slowClient.Close() })
	const lease = 3 * time.Second
	opts := []idempotency.Option{idempotency.SharedKeys(), idempotency.Lease(lease), idempotency.StoreTimeout(200 * time.Millisecond),
		idempotency.WithLogger(slog.New(slog.DiscardHandler))}
	var runs atomic.Int32
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		w.WriteHeader(http.StatusCreated)
	})
	a := httptest.NewServer(idempotency.Middleware(idempotencystore.New(slowClient, ""), opts...)(handler))
	defer a.Close()
	b := httptest.NewServer(idempotency.Middleware(idempotencystore.New(srv.Client(), ""), opts...)(handler))
	defer b.Close()

	code, _ := r21post(t, a.URL, "warmup") // the eviction policy read, the connection made
	require.Equal(t, http.StatusCreated, code)
	code, _ = r21post(t, b.URL, "warmup-b")
	require.Equal(t, http.StatusCreated, code)

	proxy.Delay(150 * time.Millisecond) // a 300 ms round trip, over the 200 ms StoreTimeout
	code, _ = r21post(t, a.URL, "order-slow")
	require.Equal(t, http.StatusServiceUnavailable, code, "the slow store gets the request a 503")
	proxy.Delay(0)
	time.Sleep(200 * time.Millisecond) // the SET lands

	start := time.Now()
	var got []int
	for time.Since(start) < lease+time.Second {
		code, _ = r21post(t, b.URL, "order-slow")
		got = append(got, code)
		if code == http.StatusCreated {
			break
		}
		time.Sleep(250 * time.Millisecond)
	}
	waited := time.Since(start)
	t.Logf("retries on replica B: %v; first 201 after %v; runs %d", got, waited.Round(time.Millisecond), runs.Load())
	assert.Less(t, waited, time.Second, "a retry on a healthy replica, with the store healthy again and nothing running, waited out the whole lease of the orphaned claim")
}
