package idempotency_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/resiliencekit/resiliencekit/idempotency"
)

// stealOnComplete is a store in which another request takes the key over
// just before the save: the claim's lease ran out unnoticed (a pause).
type stealOnComplete struct {
	idempotency.Store
}

func (s *stealOnComplete) Complete(ctx context.Context, key string, claim, rec idempotency.Record, ttl time.Duration) error {
	_ = s.Store.Release(ctx, key, claim)
	_, _ = s.Store.Begin(ctx, key, idempotency.Record{Fingerprint: claim.Fingerprint, Token: "thief"}, time.Minute)
	return s.Store.Complete(ctx, key, claim, rec, ttl)
}

// TestASaveThatFindsTheKeyTakenOverIsNotStored: a save that finds another
// request holding the key stores nothing over it: Complete returns
// ErrLeaseLost and reports the result not stored, and the other request's
// claim stands.
func TestASaveThatFindsTheKeyTakenOverIsNotStored(t *testing.T) {
	store := &stealOnComplete{Store: idempotency.NewMemoryStore(0)}
	ev := &events{}
	g := idempotency.NewGuard(store, quiet(ev)...)
	claim, _, err := g.Begin(t.Context(), "", "k", "fp")
	require.NoError(t, err)
	assert.ErrorIs(t, claim.Complete(t.Context(), idempotency.Record{Status: 201}), idempotency.ErrLeaseLost)
	assert.Equal(t, []string{"not_stored"}, ev.list())
	found, err := store.Store.Begin(t.Context(), claim.Key, idempotency.Record{Fingerprint: "fp", Token: "third"}, time.Minute)
	require.NoError(t, err)
	require.NotNil(t, found)
	assert.Equal(t, "thief", found.Token, "the other's claim stands")
	assert.False(t, found.Done)
}
