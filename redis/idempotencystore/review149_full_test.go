package idempotencystore_test

import (
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

// review149Replica is one replica of a service on srv's Redis: its own
// client, store and guard, the handler counting its runs per key in runs.
type review149Replica struct {
	url string
}

func review149Start(t *testing.T, srv *redistest.Server, runs *sync.Map, hold time.Duration, opts ...idempotency.Option) review149Replica {
	t.Helper()
	store := idempotencystore.New(srv.Client(), "r149:")
	opts = append([]idempotency.Option{idempotency.SharedKeys()}, opts...)
	mw := idempotency.Middleware(store, opts...)
	ts := httptest.NewServer(mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		k := r.Header.Get(idempotency.Header)
		v, _ := runs.LoadOrStore(k, new(atomic.Int32))
		v.(*atomic.Int32).Add(1)
		if hold > 0 && strings.HasPrefix(k, "slow") {
			time.Sleep(hold)
		}
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, "order for %s", k)
	})))
	t.Cleanup(ts.Close)
	return review149Replica{url: ts.URL}
}

func review149Post(t *testing.T, url, key string) (int, string, bool) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader("{}"))
	req.Header.Set(idempotency.Header, key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("POST %s: %v", key, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), resp.Header.Get(idempotency.ReplayedHeader) == "true"
}

func review149Runs(runs *sync.Map, key string) int32 {
	v, ok := runs.Load(key)
	if !ok {
		return 0
	}
	return v.(*atomic.Int32).Load()
}

// A Redis that is full (maxmemory with noeviction, as the docs require) is
// not down: it still answers reads, and holds every record and claim. The
// docs' table says of it "full for longer, reported, 409 then 503, never a
// second run while full". But each claim's SET NX is refused (OOM), so the
// guard counts a failing store and, after FailOpenAfter, runs every keyed
// request on its own records, never asking Redis: a repeat of a request
// whose result Redis holds, and can read, runs a second time.
func TestReview149FullRedisRunsAStoredKeyAgain(t *testing.T) {
	srv := redistest.Start(t, "--appendonly", "no", "--maxmemory-policy", "noeviction")
	var runs sync.Map
	a := review149Start(t, srv, &runs, 0, idempotency.FailOpenAfter(time.Second), idempotency.Lease(3*time.Second))
	b := review149Start(t, srv, &runs, 0, idempotency.FailOpenAfter(time.Second), idempotency.Lease(3*time.Second))

	if code, _, _ := review149Post(t, a.url, "paid-1"); code != http.StatusCreated {
		t.Fatalf("first run: %d", code)
	}
	if code, _, replayed := review149Post(t, b.url, "paid-1"); code != http.StatusCreated || !replayed {
		t.Fatalf("repeat on B before Redis is full: %d replayed=%v", code, replayed)
	}

	// Redis fills up: every write is refused, reads go on.
	c := srv.Client()
	if err := c.ConfigSet(t.Context(), "maxmemory", "1").Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.Set(t.Context(), "r149:probe", "x", 0).Err(); err == nil || !strings.Contains(err.Error(), "OOM") {
		t.Fatalf("Redis not full: %v", err)
	}
	if err := c.Get(t.Context(), "r149:"+scoped("", "paid-1")).Err(); err != nil {
		t.Fatalf("the record cannot be read from the full Redis: %v", err)
	}

	// New keys arrive at B for 2 s (they get 503 for the first second:
	// the documented cost of a failing store).
	deadline := time.Now().Add(2200 * time.Millisecond)
	n := 0
	for time.Now().Before(deadline) {
		review149Post(t, b.url, fmt.Sprintf("new-%d", n))
		n++
		time.Sleep(100 * time.Millisecond)
	}

	// The client of paid-1 retries on B: Redis holds its answer and can
	// read it to B.
	code, body, replayed := review149Post(t, b.url, "paid-1")
	t.Logf("repeat of paid-1 on B with Redis full: %d %q replayed=%v, runs=%d", code, body, replayed, review149Runs(&runs, "paid-1"))
	if got := review149Runs(&runs, "paid-1"); got != 1 {
		t.Errorf("paid-1, stored in the full (but readable) Redis, ran %d times; want 1", got)
	}
}

// The same with a request in flight on A as Redis fills: A's claim is in
// Redis, live, renewed; B, failed open, runs a repeat of it at once.
func TestReview149FullRedisRunsAKeyInFlightTwiceAtOnce(t *testing.T) {
	srv := redistest.Start(t, "--appendonly", "no", "--maxmemory-policy", "noeviction")
	var runs sync.Map
	a := review149Start(t, srv, &runs, 3*time.Second, idempotency.FailOpenAfter(time.Second), idempotency.Lease(3*time.Second))
	b := review149Start(t, srv, &runs, 3*time.Second, idempotency.FailOpenAfter(time.Second), idempotency.Lease(3*time.Second))

	done := make(chan int, 1)
	go func() {
		code, _, _ := review149Post(t, a.url, "slow-1")
		done <- code
	}()
	time.Sleep(200 * time.Millisecond)
	c := srv.Client()
	if err := c.ConfigSet(t.Context(), "maxmemory", "1").Err(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(1500 * time.Millisecond)
	for n := 0; time.Now().Before(deadline); n++ {
		review149Post(t, b.url, fmt.Sprintf("new-%d", n))
		time.Sleep(100 * time.Millisecond)
	}
	code, _, _ := review149Post(t, b.url, "slow-1") // A still runs it
	t.Logf("repeat of slow-1 on B while A runs it: %d; runs %d", code, review149Runs(&runs, "slow-1"))
	<-done
	if got := review149Runs(&runs, "slow-1"); got != 1 {
		t.Errorf("slow-1, claimed in the full Redis by A and running, ran %d times; want 1", got)
	}
}

// The same root cause without a full server: a Redis whose writes are
// refused while its reads go on (min-replicas-to-write unmet: NOREPLICAS;
// likewise MISCONF after a failed RDB save, READONLY on a replica left
// behind by a failover) makes the guard fail open and run again a request
// whose answer it could read.
func TestReview149WritesRefusedReadsServedRunsAStoredKeyAgain(t *testing.T) {
	srv := redistest.Start(t, "--appendonly", "no")
	var runs sync.Map
	a := review149Start(t, srv, &runs, 0, idempotency.FailOpenAfter(time.Second), idempotency.Lease(3*time.Second))
	b := review149Start(t, srv, &runs, 0, idempotency.FailOpenAfter(time.Second), idempotency.Lease(3*time.Second))
	if code, _, _ := review149Post(t, a.url, "paid-1"); code != http.StatusCreated {
		t.Fatalf("first run: %d", code)
	}
	c := srv.Client()
	if err := c.ConfigSet(t.Context(), "min-replicas-to-write", "1").Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.Set(t.Context(), "r149:probe", "x", 0).Err(); err == nil {
		t.Fatal("writes not refused")
	} else {
		t.Logf("a write: %v", err)
	}
	deadline := time.Now().Add(2200 * time.Millisecond)
	for n := 0; time.Now().Before(deadline); n++ {
		review149Post(t, b.url, fmt.Sprintf("new-%d", n))
		time.Sleep(100 * time.Millisecond)
	}
	code, _, replayed := review149Post(t, b.url, "paid-1")
	t.Logf("repeat of paid-1 on B, writes refused: %d replayed=%v runs=%d", code, replayed, review149Runs(&runs, "paid-1"))
	if got := review149Runs(&runs, "paid-1"); got != 1 {
		t.Errorf("paid-1, readable in Redis, ran %d times", got)
	}
}
