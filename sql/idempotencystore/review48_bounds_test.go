package idempotencystore_test

// Review 48: the store's bounds and limits.

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/resiliencekit/resiliencekit/idempotency"
	"github.com/resiliencekit/resiliencekit/sql/idempotencystore"
)

// TestReview48FrozenServerIsBoundedByStoreTimeout: PostgreSQL frozen
// (SIGSTOP); each new keyed request is refused within about StoreTimeout
// (200 ms), on a pool with idle connections and on a fresh one.
func TestReview48FrozenServerIsBoundedByStoreTimeout(t *testing.T) {
	pg, db, store := r48Server(t)
	var runs, commits atomic.Int64
	ev := &r48Events{}
	srv := httptest.NewServer(idempotency.Middleware(store, r48Opts(ev, idempotency.Lease(time.Second),
		idempotency.StoreTimeout(200*time.Millisecond), idempotency.FailOpenAfter(-1))...)(r48Handler(db, store, &runs, &commits, r48Steps{})))
	t.Cleanup(srv.Close)
	client := &http.Client{Timeout: 10 * time.Second}
	for i := range 5 { // warm the pool
		code, _, _, _ := r48Post(client, srv.URL, fmt.Sprintf("warm%d", i))
		require.Equal(t, http.StatusCreated, code)
	}
	pg.Freeze()
	defer pg.Thaw()
	var mu sync.Mutex
	var slow []string
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Go(func() {
			code, _, _, took := r48Post(client, srv.URL, fmt.Sprintf("frozen%d", i))
			mu.Lock()
			defer mu.Unlock()
			if code != http.StatusServiceUnavailable || took > 400*time.Millisecond {
				slow = append(slow, fmt.Sprintf("%d in %v", code, took))
			}
		})
		time.Sleep(50 * time.Millisecond)
	}
	wg.Wait()
	t.Logf("outside 503 within 400 ms: %v", slow)
	assert.Empty(t, slow)
}

// TestReview48TableNames: New accepts what matches a plain identifier;
// does the table then work? (Reserved words; one name in two cases.)
func TestReview48TableNames(t *testing.T) {
	_, db, _ := r48Server(t)
	for _, name := range []string{"order", "user", "select", "Idem2"} {
		var s *idempotencystore.Store
		func() {
			defer func() {
				if r := recover(); r != nil {
					t.Logf("table %q: New panics: %v", name, r)
				}
			}()
			s = idempotencystore.New(db, name)
		}()
		if s == nil {
			continue
		}
		err := s.CreateTable(t.Context())
		if err == nil {
			_, err = s.Begin(t.Context(), "k", idempotency.Record{Fingerprint: "f", Token: "t"}, time.Second)
		}
		t.Logf("table %q: %v", name, err)
		assert.NoError(t, err, "a name New accepts makes a table that works, or New panics")
	}
}

// TestReview48SQLInKeys: keys and fingerprints are parameters; a key made
// of SQL goes in and out as data, and one store's keys never touch
// another's table.
func TestReview48SQLInKeys(t *testing.T) {
	_, db, store := r48Server(t)
	other := idempotencystore.New(db, "idem_other")
	require.NoError(t, other.CreateTable(t.Context()))
	ctx := t.Context()
	keys := []string{`k'; DROP TABLE idem_other; --`, `k" OR 1=1 --`, `$1`, `\x00`, "k\\'", `' OR expires_at > now() OR '`, "ключ", "k\u202e"}
	for i, k := range keys {
		c := idempotency.Record{Fingerprint: "f", Token: fmt.Sprint("t", i)}
		found, err := store.Begin(ctx, k, c, time.Minute)
		require.NoError(t, err, k)
		require.Nil(t, found, k)
		require.NoError(t, store.Complete(ctx, k, c, idempotency.Record{Fingerprint: "f", Token: c.Token, Done: true, Status: 201, Body: []byte(k)}, time.Hour), k)
		found, err = store.Begin(ctx, k, idempotency.Record{Fingerprint: "f", Token: "other"}, time.Minute)
		require.NoError(t, err, k)
		require.NotNil(t, found, k)
		assert.Equal(t, k, string(found.Body))
	}
	assert.Equal(t, len(keys), r48Count(t, db, `SELECT count(*) FROM idem`))
	assert.Equal(t, 0, r48Count(t, db, `SELECT count(*) FROM idem_other`))
	_, err := store.Begin(ctx, "nul\x00key", idempotency.Record{Fingerprint: "f", Token: "n"}, time.Minute)
	t.Logf("a key with a NUL byte (Guard.Begin callers other than the middleware may pass one): %v", err)
	_ = context.Background
}
