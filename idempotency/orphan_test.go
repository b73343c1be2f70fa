package idempotency_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/resiliencekit/resiliencekit/idempotency"
)

// lostBegin is a store whose claims get through while its answers are
// lost: with lose set, Begin claims the key and reports a failure, as a
// call that timed out just after the store took it. With failRelease set,
// releases fail.
type lostBegin struct {
	idempotency.Store
	lose, failRelease atomic.Bool
}

var errAnswerLost = errors.New("i/o timeout")

func (s *lostBegin) Begin(ctx context.Context, key string, claim idempotency.Record, lease time.Duration) (*idempotency.Record, error) {
	found, err := s.Store.Begin(ctx, key, claim, lease)
	if s.lose.Load() {
		return nil, errAnswerLost
	}
	return found, err
}

func (s *lostBegin) Release(ctx context.Context, key string, claim idempotency.Record) error {
	if s.failRelease.Load() {
		return errStoreDown
	}
	return s.Store.Release(ctx, key, claim)
}

// leaveOrphans makes the Begins of g for keys fail, their claims taken by
// the store.
func leaveOrphans(t *testing.T, g *idempotency.Guard, store *lostBegin, keys ...string) {
	t.Helper()
	store.lose.Store(true)
	defer store.lose.Store(false)
	for _, key := range keys {
		_, _, err := g.Begin(t.Context(), "", key, "fp")
		require.ErrorIs(t, err, errAnswerLost)
	}
}

// TestAClaimWhoseAnswerWasLostIsFreedByTheRetry: a Begin that failed
// although the store took its claim leaves an orphan claim, not a request
// in progress: the retry through the same guard frees it and runs, rather
// than being refused as in progress for a whole lease. If the orphan
// cannot be freed, the retry is refused as in progress, and the key is
// free once the lease runs out.
func TestAClaimWhoseAnswerWasLostIsFreedByTheRetry(t *testing.T) {
	t.Run("freed", func(t *testing.T) {
		store := &lostBegin{Store: idempotency.NewMemoryStore(0)}
		ev := &events{}
		g := idempotency.NewGuard(store, quiet(ev)...)
		leaveOrphans(t, g, store, "k")
		assert.Equal(t, []string{"store_failed"}, ev.list())
		claim, stored, err := g.Begin(t.Context(), "", "k", "fp")
		require.NoError(t, err, "the orphan is freed, and the retry runs")
		assert.Nil(t, stored)
		require.NotNil(t, claim)
		require.NoError(t, claim.Complete(t.Context(), idempotency.Record{Status: 201}))
		assert.Equal(t, 201, storedUnder(t, g, "k").Status)
	})
	t.Run("not freed: the store fails", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			store := &lostBegin{Store: idempotency.NewMemoryStore(0)}
			g := idempotency.NewGuard(store, quiet(&events{})...)
			leaveOrphans(t, g, store, "k")
			store.failRelease.Store(true)
			_, _, err := g.Begin(t.Context(), "", "k", "fp")
			assert.ErrorIs(t, err, idempotency.ErrInProgress, "held for its lease, as it would have been")
			time.Sleep(30 * time.Second)
			claim, _, err := g.Begin(t.Context(), "", "k", "fp")
			require.NoError(t, err)
			require.NotNil(t, claim, "free one lease later")
			store.failRelease.Store(false)
			require.NoError(t, claim.Release(t.Context()))
		})
	})
	t.Run("another's claim is not freed", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			store := &lostBegin{Store: idempotency.NewMemoryStore(0)}
			g := idempotency.NewGuard(store, quiet(&events{})...)
			leaveOrphans(t, g, store, "k")
			time.Sleep(30 * time.Second) // the orphan's lease runs out, and another replica takes the key
			other, _, err := idempotency.NewGuard(store, quiet(&events{})...).Begin(t.Context(), "", "k", "fp")
			require.NoError(t, err)
			require.NotNil(t, other)
			_, _, err = g.Begin(t.Context(), "", "k", "fp")
			assert.ErrorIs(t, err, idempotency.ErrInProgress)
			require.NoError(t, other.Complete(t.Context(), idempotency.Record{Status: 201}), "the other's claim held")
		})
	})
}

// TestAGuardRemembersTheLatestOrphans: a guard remembers the claims that
// its last MaxOrphans failed Begins may have left, and no more: the oldest
// key is then held for its lease, the next oldest is freed by its retry.
// An orphan freed by its retry leaves room for one more.
func TestAGuardRemembersTheLatestOrphans(t *testing.T) {
	for _, tc := range []struct {
		name               string
		first, then        int // failed Begins before and after the retry of k-0
		forgot, remembered string
	}{
		{"one over the bound", idempotency.MaxOrphans + 1, 0, "k-0", "k-1"},
		{"one freed, then two more", idempotency.MaxOrphans, 2, "k-1", "k-2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			store := &lostBegin{Store: idempotency.NewMemoryStore(0)}
			g := idempotency.NewGuard(store, quiet(&events{})...)
			fail := func(from, n int) {
				keys := make([]string, n)
				for i := range keys {
					keys[i] = fmt.Sprint("k-", from+i)
				}
				leaveOrphans(t, g, store, keys...)
			}
			fail(0, tc.first)
			if tc.then > 0 {
				claim, _, err := g.Begin(t.Context(), "", "k-0", "fp")
				require.NoError(t, err)
				require.NotNil(t, claim, "k-0, remembered, is freed")
				require.NoError(t, claim.Release(t.Context()))
				fail(tc.first, tc.then)
			}
			_, _, err := g.Begin(t.Context(), "", tc.forgot, "fp")
			assert.ErrorIs(t, err, idempotency.ErrInProgress, "the oldest, forgotten: held for its lease")
			claim, _, err := g.Begin(t.Context(), "", tc.remembered, "fp")
			require.NoError(t, err, "the oldest remembered is freed")
			require.NotNil(t, claim)
			require.NoError(t, claim.Release(t.Context()))
		})
	}
}
