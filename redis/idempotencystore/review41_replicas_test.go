package idempotencystore_test

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

	"github.com/redis/go-redis/v9"

	"github.com/resiliencekit/resiliencekit/idempotency"
	"github.com/resiliencekit/resiliencekit/redis/idempotencystore"
	"github.com/resiliencekit/resiliencekit/redis/redistest"
)

var r41Quiet = slog.New(slog.DiscardHandler)

// Five replicas (a guard and a client each) on one real redis-server,
// hundreds of goroutines hammering each key at once: one run per key, every
// replay the key's own record, and once a key has ended, simultaneous
// repeats are all replayed.
func TestReview41_ReplicasHammerOneKey(t *testing.T) {
	srv := redistest.Start(t)
	const replicas = 5
	var guards []*idempotency.Guard
	for range replicas {
		c := redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true, PoolSize: 50})
		t.Cleanup(func() { _ = c.Close() })
		guards = append(guards, idempotency.NewGuard(idempotencystore.New(c, "r41:"),
			idempotency.StoreTimeout(time.Second), idempotency.Lease(5*time.Second), idempotency.WithLogger(r41Quiet)))
	}
	ctx := context.Background()
	for k := range 20 {
		key := fmt.Sprint("key-", k)
		var runs, replays, inprog, other atomic.Int64
		var wg sync.WaitGroup
		for i := range 300 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				g := guards[i%replicas]
				for range 8 {
					c, rec, err := g.Begin(ctx, "s", key, "fp-"+key)
					switch {
					case c != nil:
						runs.Add(1)
						time.Sleep(20 * time.Millisecond)
						if err := c.Complete(ctx, idempotency.Record{Status: 201, Body: []byte(key)}); err != nil {
							t.Errorf("complete: %v", err)
						}
					case rec != nil:
						if string(rec.Body) != key || rec.Status != 201 || rec.Fingerprint != "fp-"+key {
							t.Errorf("replay of %s: %+v", key, rec)
						}
						replays.Add(1)
					case errors.Is(err, idempotency.ErrInProgress):
						inprog.Add(1)
					default:
						other.Add(1)
						t.Errorf("%s: %v", key, err)
					}
					time.Sleep(5 * time.Millisecond)
				}
			}()
		}
		wg.Wait()
		if runs.Load() != 1 {
			t.Errorf("%s: %d runs", key, runs.Load())
		}
		if k == 0 {
			t.Logf("%s: runs %d replays %d in progress %d other %d", key, runs.Load(), replays.Load(), inprog.Load(), other.Load())
		}
		// Ended: 200 simultaneous repeats on one replica are all replayed.
		var refused atomic.Int64
		start := make(chan struct{})
		for range 200 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				_, rec, err := guards[0].Begin(ctx, "s", key, "fp-"+key)
				if rec == nil || string(rec.Body) != key {
					refused.Add(1)
					_ = err
				}
			}()
		}
		close(start)
		wg.Wait()
		if refused.Load() != 0 {
			t.Errorf("%s: %d of 200 simultaneous repeats of an ended key not replayed", key, refused.Load())
		}
	}
}

// The server frozen while many Begins of one key wait on one replica's
// claimant: every one answers within about a store timeout (the
// claimant's own bound), none hangs, none runs; after the thaw, one run.
func TestReview41_FrozenServerWaiters(t *testing.T) {
	srv := redistest.Start(t)
	const T = 300 * time.Millisecond
	c := redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true, PoolSize: 20})
	t.Cleanup(func() { _ = c.Close() })
	g := idempotency.NewGuard(idempotencystore.New(c, "r41f:"), idempotency.StoreTimeout(T), idempotency.Lease(10*T),
		idempotency.FailOpenAfter(-1), idempotency.WithLogger(r41Quiet))
	ctx := context.Background()
	// warm the eviction check
	if cl, _, err := g.Begin(ctx, "s", "warm", "fp"); err != nil {
		t.Fatal(err)
	} else {
		_ = cl.Release(ctx)
	}
	srv.Freeze()
	var wg sync.WaitGroup
	var maxWait atomic.Int64
	var claims atomic.Int64
	for range 500 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			t0 := time.Now()
			cl, _, _ := g.Begin(ctx, "s", "k", "fp")
			if cl != nil {
				claims.Add(1)
			}
			d := int64(time.Since(t0))
			for {
				m := maxWait.Load()
				if d <= m || maxWait.CompareAndSwap(m, d) {
					break
				}
			}
		}()
	}
	wg.Wait()
	srv.Thaw()
	t.Logf("frozen: longest Begin %v, claims %d", time.Duration(maxWait.Load()), claims.Load())
	if m := time.Duration(maxWait.Load()); m > 3*T {
		t.Errorf("longest Begin %v over 3 store timeouts", m)
	}
	if claims.Load() != 0 {
		t.Errorf("claims while frozen: %d", claims.Load())
	}
	time.Sleep(2 * T)
	var runs atomic.Int64
	for range 100 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 20 {
				cl, _, _ := g.Begin(ctx, "s", "k", "fp")
				if cl != nil {
					runs.Add(1)
					_ = cl.Complete(ctx, idempotency.Record{Status: 200})
				}
				time.Sleep(10 * time.Millisecond)
			}
		}()
	}
	wg.Wait()
	if runs.Load() != 1 {
		t.Errorf("runs after thaw: %d", runs.Load())
	}
}

// Over HTTP: three replicas' middleware on one redis-server; a burst of
// identical POSTs spread over them: one handler run; after it ended, a
// burst to one replica is all replayed (200 with Idempotent-Replayed).
func TestReview41_HTTPReplicas(t *testing.T) {
	srv := redistest.Start(t)
	var runs atomic.Int64
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		time.Sleep(100 * time.Millisecond)
		w.Header().Set("X-Order", "42")
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, "order 42")
	})
	var urls []string
	for range 3 {
		c := redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true, PoolSize: 50})
		t.Cleanup(func() { _ = c.Close() })
		mw := idempotency.Middleware(idempotencystore.New(c, "r41h:"), idempotency.SharedKeys(), idempotency.WithLogger(r41Quiet))
		s := httptest.NewServer(mw(h))
		t.Cleanup(s.Close)
		urls = append(urls, s.URL)
	}
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 300}}
	post := func(url string) (int, string, string) {
		req, _ := http.NewRequest(http.MethodPost, url+"/orders", strings.NewReader(`{"n":1}`))
		req.Header.Set("Idempotency-Key", "order-key-1")
		resp, err := client.Do(req)
		if err != nil {
			t.Error(err)
			return 0, "", ""
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header.Get(idempotency.ReplayedHeader), string(bytes.TrimSpace(b))
	}
	var wg sync.WaitGroup
	codes := sync.Map{}
	for i := range 150 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			code, _, _ := post(urls[i%3])
			v, _ := codes.LoadOrStore(code, new(atomic.Int64))
			v.(*atomic.Int64).Add(1)
		}()
	}
	wg.Wait()
	codes.Range(func(k, v any) bool { t.Logf("first burst: %v x%d", k, v.(*atomic.Int64).Load()); return true })
	if runs.Load() != 1 {
		t.Errorf("runs %d", runs.Load())
	}
	var bad atomic.Int64
	for range 150 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			code, replayed, body := post(urls[0])
			if code != http.StatusCreated || replayed != "true" || body != "order 42" {
				bad.Add(1)
			}
		}()
	}
	wg.Wait()
	if bad.Load() != 0 || runs.Load() != 1 {
		t.Errorf("second burst: %d of 150 not replayed, runs %d", bad.Load(), runs.Load())
	}
}
