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

	"github.com/resiliencekit/resiliencekit/idempotency"
	"github.com/resiliencekit/resiliencekit/redis/idempotencystore"
	"github.com/resiliencekit/resiliencekit/redis/redistest"
	"github.com/resiliencekit/resiliencekit/resilience"
)

// TestReview115_ClusterShardDownNeverFailsOpen: a Redis Cluster of three
// masters (cluster-require-full-coverage no, so that the others serve
// their slots) loses one master. Keys on the two live masters are claimed
// there; a key on the dead one fails every claim. The guard counts the
// share of failed claims over all keys (about a third), never half, so it
// never fails open: the request whose key is on the dead shard gets 503
// for as long as that shard is down, far past FailOpenAfter (1 s here),
// where the docs promise that a refusal for want of a store is bounded.
func TestReview115_ClusterShardDownNeverFailsOpen(t *testing.T) {
	t.Cleanup(func() { time.Sleep(1500 * time.Millisecond) }) // go-redis's dialer to the dead node ends after its client (goleak)
	cl := redistest.StartCluster(t, 3, 0)
	ctx := context.Background()
	for _, n := range cl.Nodes {
		c := redis.NewClient(&redis.Options{Addr: n.Addr()})
		if err := c.ConfigSet(ctx, "cluster-require-full-coverage", "no").Err(); err != nil {
			t.Fatal(err)
		}
		c.Close()
	}
	client := cl.Client()
	store := idempotencystore.New(client, "r115:")
	var runs atomic.Int64
	var mu sync.Mutex
	errs := map[string]int{}
	lis := resilience.ListenerFunc(func(e resilience.Event) {
		mu.Lock()
		defer mu.Unlock()
		msg := e.Kind.String()
		if e.Err != nil {
			msg += ": " + e.Err.Error()
			if len(msg) > 120 {
				msg = msg[:120]
			}
		}
		errs[msg]++
	})
	mw := idempotency.Middleware(store, idempotency.SharedKeys(), idempotency.FailOpenAfter(time.Second),
		idempotency.Lease(1500*time.Millisecond), idempotency.StoreTimeout(200*time.Millisecond),
		idempotency.WithListener(lis), idempotency.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	srv := httptest.NewServer(mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		w.WriteHeader(http.StatusCreated)
	})))
	defer srv.Close()
	do := func(key string) int {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/orders", strings.NewReader("{}"))
		req.Header.Set(idempotency.Header, key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	// Warm up: every shard answers.
	for i := range 30 {
		if c := do(fmt.Sprintf("warm-%d", i)); c != http.StatusCreated {
			t.Fatalf("warm-up: %d", c)
		}
	}
	victim := cl.MasterOf("r115:" + scoped("", "order-0"))
	// A client key whose record is on the victim, to be retried from 4 s on.
	deadKey := ""
	for i := 1; i < 1000 && deadKey == ""; i++ {
		if k := fmt.Sprintf("order-%d", i); cl.MasterOf("r115:"+scoped("", k)) == victim {
			deadKey = k
		}
	}
	victim.Kill()
	killed := time.Now()
	var late, retried []string
	newKeys, refusedNew := 0, 0
	for i := 0; time.Since(killed) < 7*time.Second; i++ {
		for j := range 3 { // new requests of many callers, their keys over every shard
			code := do(fmt.Sprintf("new-%d-%d", i, j))
			if el := time.Since(killed); el > 3*time.Second {
				newKeys++
				if code == http.StatusServiceUnavailable {
					refusedNew++
					late = append(late, fmt.Sprintf("%.1fs", el.Seconds()))
				}
			}
		}
		if el := time.Since(killed); el > 4*time.Second && i%3 == 0 {
			if code := do(deadKey); code == http.StatusServiceUnavailable {
				retried = append(retried, fmt.Sprintf("%.1fs", el.Seconds()))
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	if refusedNew > 0 || len(retried) > 0 {
		t.Errorf("one master of three killed, FailOpenAfter 1 s: from 3 s to 7 s after the kill %d of %d new keyed requests got 503 (at %v); a client retrying key %q on the dead master got 503 at %v: never failed open",
			refusedNew, newKeys, late, deadKey, retried)
	}
	mu.Lock()
	for m, n := range errs {
		t.Logf("%5d %s", n, m)
	}
	mu.Unlock()
}

// TestReview115_ClusterEvictingMasterNeverFailsOpen: docs/idempotency.md
// ("Redis must not evict"): "while the server evicts, Begin fails with
// ErrEvictionPolicy, so requests get 503 ... and after FailOpenAfter they
// run on the replica's own records". In a cluster of three masters one
// of which evicts, that master's keys get 503 without end: a third of the
// claims fail, never half, and the guard never fails open.
func TestReview115_ClusterEvictingMasterNeverFailsOpen(t *testing.T) {
	cl := redistest.StartCluster(t, 3, 0)
	client := cl.Client()
	bad := cl.MasterOf("r115e:" + scoped("", "order-0"))
	bc := bad.Client()
	if err := bc.ConfigSet(context.Background(), "maxmemory", "100mb").Err(); err != nil {
		t.Fatal(err)
	}
	if err := bc.ConfigSet(context.Background(), "maxmemory-policy", "allkeys-lru").Err(); err != nil {
		t.Fatal(err)
	}
	mw := idempotency.Middleware(idempotencystore.New(client, "r115e:"), idempotency.SharedKeys(), idempotency.FailOpenAfter(time.Second),
		idempotency.Lease(1500*time.Millisecond), idempotency.StoreTimeout(200*time.Millisecond),
		idempotency.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	srv := httptest.NewServer(mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusCreated) })))
	defer srv.Close()
	do := func(key string) int {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/orders", strings.NewReader("{}"))
		req.Header.Set(idempotency.Header, key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	start := time.Now()
	late, total := 0, 0
	for i := 0; time.Since(start) < 5*time.Second; i++ {
		for j := range 3 {
			code := do(fmt.Sprintf("new-%d-%d", i, j))
			if time.Since(start) > 3*time.Second {
				total++
				if code == http.StatusServiceUnavailable {
					late++
				}
			}
		}
		time.Sleep(30 * time.Millisecond)
	}
	if late > 0 {
		t.Errorf("one master of three evicts, FailOpenAfter 1 s: from 3 s to 5 s, %d of %d keyed requests got 503", late, total)
	}
}
