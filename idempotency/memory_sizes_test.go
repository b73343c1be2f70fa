package idempotency_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/resiliencekit/resiliencekit/idempotency"
)

// A claim of the tests below: key "a" or "b", fingerprint "fp", token "t".
var sizedClaim = idempotency.Record{Fingerprint: "fp", Token: "t"}

// claimSize is what such a claim counts for: the overhead, a key of one
// byte, a fingerprint of two and a token of one.
const claimSize = idempotency.MemoryEntryOverhead + 1 + 2 + 1

// done is the result of such a claim with body.
func done(body []byte, header http.Header) idempotency.Record {
	return idempotency.Record{Fingerprint: "fp", Token: "t", Done: true, Status: 201, Body: body, Header: header}
}

// TestMemoryStoreCountsExactly: a result counts for its claim's fields, its
// body's length (not the capacity of the buffer it came in: it is copied
// to one of its length) and each header's name, plus each value and 16
// bytes for it.
func TestMemoryStoreCountsExactly(t *testing.T) {
	for _, tc := range []struct {
		name string
		rec  idempotency.Record
		want int64
	}{
		{"no body", done(nil, nil), claimSize},
		{"a body of 10", done(make([]byte, 10), nil), claimSize + 10},
		{"a body of 10 in a buffer of 1000", done(make([]byte, 10, 1000), nil), claimSize + 10},
		{"one header", done(nil, http.Header{"Location": {"/orders/1"}}), claimSize + 8 + 9 + 16},
		{"a header of two values", done(nil, http.Header{"Vary": {"Accept", "Origin"}}), claimSize + 4 + 6 + 16 + 6 + 16},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := idempotency.NewMemoryStore(0)
			found, err := s.Begin(t.Context(), "a", sizedClaim, time.Minute)
			require.NoError(t, err)
			require.Nil(t, found)
			assert.EqualValues(t, claimSize, s.Bytes(), "the claim")
			require.NoError(t, s.Complete(t.Context(), "a", sizedClaim, tc.rec, time.Hour))
			assert.Equal(t, tc.want, s.Bytes(), "the result")
		})
	}
}

// TestMemoryStoreBoundIsExact: a result that fits the bound exactly is
// kept whole, with the records before it; one a byte over it evicts the
// oldest record, and with none to evict is kept without its body, as
// Truncated, the store never counting more than its bound.
func TestMemoryStoreBoundIsExact(t *testing.T) {
	ctx := t.Context()
	begin := func(t *testing.T, s *idempotency.MemoryStore, key string) {
		found, err := s.Begin(ctx, key, sizedClaim, time.Minute)
		require.NoError(t, err)
		require.Nil(t, found)
	}
	replay := func(t *testing.T, s *idempotency.MemoryStore, key string) *idempotency.Record {
		found, err := s.Begin(ctx, key, sizedClaim, time.Minute)
		require.NoError(t, err)
		require.NotNil(t, found, "%s is kept", key)
		require.True(t, found.Done)
		return found
	}
	const room = idempotency.MinMemoryBytes - claimSize // a body's in the smallest store
	t.Run("a lone result that fits exactly", func(t *testing.T) {
		s := idempotency.NewMemoryStore(claimSize + room)
		begin(t, s, "a")
		require.NoError(t, s.Complete(ctx, "a", sizedClaim, done(make([]byte, room), nil), time.Hour))
		found := replay(t, s, "a")
		assert.False(t, found.Truncated)
		assert.Len(t, found.Body, room)
		assert.EqualValues(t, claimSize+room, s.Bytes())
	})
	t.Run("a lone result a byte too large", func(t *testing.T) {
		s := idempotency.NewMemoryStore(claimSize + room)
		begin(t, s, "a")
		require.NoError(t, s.Complete(ctx, "a", sizedClaim, done(make([]byte, room+1), http.Header{"Location": {"/orders/1"}}), time.Hour))
		found := replay(t, s, "a")
		assert.True(t, found.Truncated, "not replayable")
		assert.Nil(t, found.Body)
		assert.Nil(t, found.Header)
		assert.Equal(t, 201, found.Status, "the outcome is kept")
		assert.EqualValues(t, claimSize, s.Bytes())
	})
	const half = idempotency.MinMemoryBytes/2 - claimSize // a body of two in the smallest store
	for _, tc := range []struct {
		name    string
		second  int   // the second result's body
		kept    int   // records kept
		counted int64 // bytes
	}{
		{"two results that fit exactly", half, 2, 2 * (claimSize + half)},
		{"the second a byte too large", half + 1, 1, claimSize + half + 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := idempotency.NewMemoryStore(2 * (claimSize + half))
			begin(t, s, "a")
			require.NoError(t, s.Complete(ctx, "a", sizedClaim, done(make([]byte, half), nil), time.Hour))
			begin(t, s, "b")
			require.NoError(t, s.Complete(ctx, "b", sizedClaim, done(make([]byte, tc.second), nil), time.Hour))
			assert.Equal(t, tc.kept, s.Len(), "the oldest record makes room only if it must")
			if tc.kept == 2 {
				assert.Len(t, replay(t, s, "a").Body, half)
			}
			assert.Len(t, replay(t, s, "b").Body, tc.second)
			assert.Equal(t, tc.counted, s.Bytes())
		})
	}
}
