package idempotency_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/resiliencekit/resiliencekit/idempotency"
)

// shardStore is a store of which one shard is down: every call on a key
// whose client key starts with "dead-" fails (as a Redis Cluster master
// that is down, with cluster-require-full-coverage no, fails the keys of
// its slots while the other masters answer theirs).
type shardStore struct{ mem *idempotency.MemoryStore }

var errShardDown = errors.New("CLUSTERDOWN the shard of this slot is down")

func dead(key string) bool { _, k, _ := strings.Cut(key, ":"); return strings.HasPrefix(k, "dead-") }

func (s shardStore) Begin(ctx context.Context, key string, claim idempotency.Record, lease time.Duration) (*idempotency.Record, error) {
	if dead(key) {
		return nil, errShardDown
	}
	return s.mem.Begin(ctx, key, claim, lease)
}
func (s shardStore) Renew(ctx context.Context, key string, claim idempotency.Record, lease time.Duration) error {
	if dead(key) {
		return errShardDown
	}
	return s.mem.Renew(ctx, key, claim, lease)
}
func (s shardStore) Complete(ctx context.Context, key string, claim, rec idempotency.Record, ttl time.Duration) error {
	if dead(key) {
		return errShardDown
	}
	return s.mem.Complete(ctx, key, claim, rec, ttl)
}
func (s shardStore) Release(ctx context.Context, key string, claim idempotency.Record) error {
	if dead(key) {
		return errShardDown
	}
	return s.mem.Release(ctx, key, claim)
}

// TestReview115_OneShardDownNeverFailsOpen: a store down for some keys and
// not others (one shard of a cluster) fails those keys' requests without
// end. The docs promise "a refusal for want of a store lasts a bounded
// time": FailOpenAfter (here 2 s) plus at most 5 s. A client whose key is
// on the dead shard retries it once a second for 60 s: every retry gets
// 503, whatever FailOpenAfter says, where a plain server would have run it.
func TestReview115_OneShardDownNeverFailsOpen(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var runs atomic.Int64
		mw := idempotency.Middleware(shardStore{idempotency.NewMemoryStore(0)}, idempotency.SharedKeys(),
			idempotency.FailOpenAfter(2*time.Second), idempotency.Lease(3*time.Second), idempotency.StoreTimeout(100*time.Millisecond),
			idempotency.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
		h := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			runs.Add(1)
			w.WriteHeader(http.StatusCreated)
		}))
		do := func(key string) int {
			req := httptest.NewRequest(http.MethodPost, "/orders", strings.NewReader("{}"))
			req.Header.Set(idempotency.Header, key)
			rr := httptest.NewRecorder()
			h.ServeHTTP(rr, req)
			return rr.Code
		}
		// Traffic: each 100 ms, two new keys on the live shards; the client
		// of the dead shard's key retries it each second.
		refusedLate := 0
		lastCode := 0
		for i := range 600 {
			do(fmt.Sprintf("live-%d-a", i))
			do(fmt.Sprintf("live-%d-b", i))
			if i%10 == 0 {
				lastCode = do("dead-order-1")
				if lastCode == http.StatusServiceUnavailable && time.Duration(i)*100*time.Millisecond > 2*time.Second+5*time.Second+time.Second {
					refusedLate++
				}
			}
			time.Sleep(100 * time.Millisecond)
		}
		if refusedLate > 0 {
			t.Errorf("the request of a key on the dead shard got 503 %d times after FailOpenAfter+5s (last %d at 60 s): a refusal for want of a store is not bounded", refusedLate, lastCode)
		}
		time.Sleep(10 * time.Second) // let reapers end
	})
}

// TestReview115_TwoShardsDownFlapsOnTheProbe: two shards of three down,
// the probe's key (one fixed key) on the live one. The guard fails open
// after FailOpenAfter, then its probe answers three times in a row, it
// ends the outage, and the dead shards' keys are refused for another
// FailOpenAfter, without end: over a minute, most of their requests are
// refused, where the docs promise a refusal bounded by FailOpenAfter.
func TestReview115_TwoShardsDownFlapsOnTheProbe(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mw := idempotency.Middleware(shardStore{idempotency.NewMemoryStore(0)}, idempotency.SharedKeys(),
			idempotency.FailOpenAfter(2*time.Second), idempotency.Lease(3*time.Second), idempotency.StoreTimeout(100*time.Millisecond),
			idempotency.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
		h := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusCreated) }))
		do := func(key string) int {
			req := httptest.NewRequest(http.MethodPost, "/orders", strings.NewReader("{}"))
			req.Header.Set(idempotency.Header, key)
			rr := httptest.NewRecorder()
			h.ServeHTTP(rr, req)
			return rr.Code
		}
		late, refused := 0, 0
		for i := range 600 {
			do(fmt.Sprintf("live-%d", i))
			for j := range 2 {
				code := do(fmt.Sprintf("dead-%d-%d", i, j))
				if i >= 100 { // from 10 s on
					late++
					if code == http.StatusServiceUnavailable {
						refused++
					}
				}
			}
			time.Sleep(100 * time.Millisecond)
		}
		if refused > 0 {
			t.Errorf("from 10 s to 60 s, %d of %d requests on the dead shards got 503 (FailOpenAfter 2 s)", refused, late)
		}
		time.Sleep(10 * time.Second)
	})
}
