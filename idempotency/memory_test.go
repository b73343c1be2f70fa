package idempotency_test

import (
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
	storetest.Run(t, func(*testing.T) idempotency.Store { return idempotency.NewMemoryStore(50) }, storetest.Capacity(50))
}

func TestMemoryStoreNeverEvictsAClaimInFlight(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := idempotency.NewMemoryStore(3)
		ctx := t.Context()
		claim := idempotency.Record{Token: "t"}
		done := idempotency.Record{Done: true, Status: 201}
		for _, k := range []string{"a", "b"} {
			found, err := store.Begin(ctx, k, claim, time.Minute)
			require.NoError(t, err)
			require.Nil(t, found)
			require.NoError(t, store.Complete(ctx, k, claim, done, time.Hour))
		}
		_, err := store.Begin(ctx, "c", claim, time.Minute) // in flight
		require.NoError(t, err)
		for _, k := range []string{"d", "e"} { // evict the records, oldest first
			_, err := store.Begin(ctx, k, claim, time.Minute)
			require.NoError(t, err)
		}
		found, err := store.Begin(ctx, "a", claim, time.Minute)
		require.ErrorIs(t, err, idempotency.ErrFull, "full of requests in flight")
		assert.Nil(t, found)
		found, err = store.Begin(ctx, "c", claim, time.Minute)
		require.NoError(t, err)
		require.NotNil(t, found, "the claim in flight was kept")
		assert.False(t, found.Done)

		time.Sleep(time.Minute) // the leases run out
		found, err = store.Begin(ctx, "new", claim, time.Minute)
		require.NoError(t, err)
		assert.Nil(t, found, "an expired claim makes room")
	})
}

// TestMemoryStoreDropsAnExpiredClaimBeforeALiveRecord.
func TestMemoryStoreDropsAnExpiredClaimBeforeALiveRecord(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := idempotency.NewMemoryStore(2)
		ctx := t.Context()
		claim := idempotency.Record{Fingerprint: "fp", Token: "t"}
		_, _ = store.Begin(ctx, "a", claim, time.Minute)
		require.NoError(t, store.Complete(ctx, "a", claim, idempotency.Record{Fingerprint: "fp", Done: true, Status: 201}, 24*time.Hour))
		_, _ = store.Begin(ctx, "b", claim, 10*time.Millisecond)
		time.Sleep(20 * time.Millisecond) // b's lease runs out
		found, err := store.Begin(ctx, "c", claim, time.Minute)
		require.NoError(t, err)
		require.Nil(t, found)
		found, err = store.Begin(ctx, "a", claim, time.Minute)
		require.NoError(t, err)
		require.NotNil(t, found, "a's record was kept")
		assert.True(t, found.Done)
	})
}
