package idempotency_test

import (
	"bytes"
	"fmt"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/resiliencekit/resiliencekit/idempotency"
	"github.com/resiliencekit/resiliencekit/idempotency/storetest"
)

func TestMemoryStoreContract(t *testing.T) {
	storetest.Run(t, func(*testing.T) idempotency.Store { return idempotency.NewMemoryStore(0) })
	// Room for 50 of the contract's claims, and not 51: each counts the
	// overhead, its key (a 30-byte prefix and "claim-0" to "claim-49"),
	// its fingerprint "fp" and its token "holder".
	const room = 10*(idempotency.MemoryEntryOverhead+30+7+2+6) + 40*(idempotency.MemoryEntryOverhead+30+8+2+6) + 250
	storetest.Run(t, func(*testing.T) idempotency.Store { return idempotency.NewMemoryStore(room) }, storetest.Capacity(50))
}

// entries is the bound of a memory store with room for n entries of the
// tests below: keys of one byte and pad, tokens and fingerprints of at
// most two. The pad makes two entries no smaller than MinMemoryBytes.
func entries(n int64) int64 { return n * (idempotency.MemoryEntryOverhead + 4 + int64(len(pad))) }

// pad follows the keys of the tests that use entries.
var pad = strings.Repeat(".", idempotency.MinMemoryBytes/2-idempotency.MemoryEntryOverhead)

// TestMemoryStoreIsBoundedInBytes: 300 keys with 1 MiB answers, through
// the middleware on a store of the default bound: the store never counts
// more than its bound, the oldest records go first, the newest replay, and
// the heap stays near the bound.
func TestMemoryStoreIsBoundedInBytes(t *testing.T) {
	store := idempotency.NewMemoryStore(0)
	answer := bytes.Repeat([]byte("x"), 1<<20)
	h := idempotency.Middleware(store, idempotency.SharedKeys())(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write(answer)
	}))
	post := func(key string) *httptest.ResponseRecorder {
		r := httptest.NewRequest(http.MethodPost, "/", nil)
		r.Header.Set(idempotency.Header, key)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w
	}
	var most int64
	for i := range 300 {
		require.Equal(t, http.StatusOK, post(fmt.Sprint("k-", i)).Code)
		most = max(most, store.Bytes())
	}
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	t.Logf("300 answers of 1 MiB: the store counts at most %.1f MiB of its %d MiB bound, holds %d records; heap in use %.1f MiB",
		float64(most)/(1<<20), idempotency.DefaultMemoryBytes>>20, store.Len(), float64(m.HeapInuse)/(1<<20))
	assert.LessOrEqual(t, most, int64(idempotency.DefaultMemoryBytes))
	assert.Less(t, m.HeapInuse, uint64(idempotency.DefaultMemoryBytes+32<<20), "the heap near the bound, not 300 MiB")
	w := post("k-299")
	assert.Equal(t, "true", w.Header().Get(idempotency.ReplayedHeader), "the newest is replayed")
	assert.Equal(t, 1<<20, w.Body.Len())
}

func TestMemoryStoreNeverEvictsAClaimInFlight(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := idempotency.NewMemoryStore(entries(3))
		ctx := t.Context()
		claim := idempotency.Record{Token: "t"}
		done := idempotency.Record{Done: true, Status: 201}
		for _, k := range []string{"a", "b"} {
			found, err := store.Begin(ctx, k+pad, claim, time.Minute)
			require.NoError(t, err)
			require.Nil(t, found)
			require.NoError(t, store.Complete(ctx, k+pad, claim, done, time.Hour))
		}
		_, err := store.Begin(ctx, "c"+pad, claim, time.Minute) // in flight
		require.NoError(t, err)
		for _, k := range []string{"d", "e"} { // evict the records, oldest first
			_, err := store.Begin(ctx, k+pad, claim, time.Minute)
			require.NoError(t, err)
		}
		found, err := store.Begin(ctx, "a"+pad, claim, time.Minute)
		require.ErrorIs(t, err, idempotency.ErrFull, "full of requests in flight")
		assert.Nil(t, found)
		found, err = store.Begin(ctx, "c"+pad, idempotency.Record{Token: "u"}, time.Minute)
		require.NoError(t, err)
		require.NotNil(t, found, "the claim in flight was kept")
		assert.False(t, found.Done)

		time.Sleep(time.Minute) // the leases run out
		found, err = store.Begin(ctx, "new"+pad, claim, time.Minute)
		require.NoError(t, err)
		assert.Nil(t, found, "an expired claim makes room")
	})
}

// TestMemoryStoreDropsAnExpiredClaimBeforeALiveRecord.
func TestMemoryStoreDropsAnExpiredClaimBeforeALiveRecord(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := idempotency.NewMemoryStore(entries(2))
		ctx := t.Context()
		claim := idempotency.Record{Fingerprint: "fp", Token: "t"}
		_, _ = store.Begin(ctx, "a"+pad, claim, time.Minute)
		require.NoError(t, store.Complete(ctx, "a"+pad, claim, idempotency.Record{Fingerprint: "fp", Done: true, Status: 201}, 24*time.Hour))
		_, _ = store.Begin(ctx, "b"+pad, claim, 10*time.Millisecond)
		time.Sleep(20 * time.Millisecond) // b's lease runs out
		found, err := store.Begin(ctx, "c"+pad, claim, time.Minute)
		require.NoError(t, err)
		require.Nil(t, found)
		found, err = store.Begin(ctx, "a"+pad, claim, time.Minute)
		require.NoError(t, err)
		require.NotNil(t, found, "a's record was kept")
		assert.True(t, found.Done)
	})
}

// TestMemoryStoreCountsWhatABodyHoldsOnTo: a body of a few bytes in a
// buffer of 1 MiB (a recorder's grown slice, say) would keep the whole
// buffer alive while counted by its length: 150 of them stay under the
// bound in heap, not 150 MiB.
func TestMemoryStoreCountsWhatABodyHoldsOnTo(t *testing.T) {
	store := idempotency.NewMemoryStore(0)
	ctx := t.Context()
	for i := range 150 {
		key, claim := fmt.Sprint("k-", i), idempotency.Record{Fingerprint: "fp", Token: "t"}
		found, err := store.Begin(ctx, key, claim, time.Minute)
		require.NoError(t, err)
		require.Nil(t, found)
		body := make([]byte, 10, 1<<20)
		require.NoError(t, store.Complete(ctx, key, claim, idempotency.Record{Fingerprint: "fp", Token: "t", Done: true, Status: 200, Body: body}, time.Hour))
	}
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	assert.Less(t, m.HeapInuse, uint64(idempotency.DefaultMemoryBytes+32<<20), "the heap near the bound, not 150 MiB")
	assert.LessOrEqual(t, store.Bytes(), int64(idempotency.DefaultMemoryBytes))
}
