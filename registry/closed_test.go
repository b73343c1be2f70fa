package registry_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/registry"
)

// A shared breaker closed and made again under its name (a configuration
// reloaded) registers at once, with no snapshot taken in between: the
// closed one's name is free as soon as it is closed.
func TestAClosedSharedBreakersNameIsFreeAtOnce(t *testing.T) {
	r := registry.New()
	shared := func() *breaker.Breaker {
		return breaker.New("payments", breaker.Shared(closedStore{}), breaker.FailureRate(0.5, 10))
	}
	old := shared()
	require.NoError(t, r.AddBreaker(old))
	require.NoError(t, old.Close())

	_, found := r.Breaker("payments")
	assert.False(t, found, "a closed breaker is not found")
	names, _ := r.Names()
	assert.Empty(t, names)
	assert.ErrorIs(t, r.SetMode(context.Background(), "payments", breaker.ForcedOpen, "alice"), registry.ErrNotFound)

	renewed := shared()
	t.Cleanup(func() { _ = renewed.Close() })
	require.NoError(t, r.AddBreaker(renewed), "the name is free")
	got, found := r.Breaker("payments")
	assert.True(t, found)
	assert.Same(t, renewed, got)
}
