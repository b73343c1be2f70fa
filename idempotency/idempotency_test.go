package idempotency_test

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/resiliencekit/resiliencekit/idempotency"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// quiet is a guard's options that collect its events and log nothing.
func quiet(ev *events, opts ...idempotency.Option) []idempotency.Option {
	return append(opts, idempotency.WithListener(ev), idempotency.WithLogger(slog.New(slog.DiscardHandler)))
}

// TestGuardRunsOnceAndReplays: the transport-neutral core claims a key,
// refuses repeats while the first runs, stores its result and replays it.
func TestGuardRunsOnceAndReplays(t *testing.T) {
	ctx := t.Context()
	g := idempotency.NewGuard(nil)
	claim, stored, err := g.Begin(ctx, "alice", "k", "fp")
	require.NoError(t, err)
	require.Nil(t, stored)
	require.NotNil(t, claim)
	assert.Same(t, claim, idempotency.FromContext(claim.Context()), "the request's context carries its claim")

	_, _, err = g.Begin(ctx, "alice", "k", "fp")
	assert.ErrorIs(t, err, idempotency.ErrInProgress)
	_, _, err = g.Begin(ctx, "alice", "k", "other")
	assert.ErrorIs(t, err, idempotency.ErrKeyReused)

	require.NoError(t, claim.Complete(ctx, idempotency.Record{Status: 201, Body: []byte("order 1")}))
	assert.Error(t, claim.Context().Err(), "the claim ended")
	claim2, stored, err := g.Begin(ctx, "alice", "k", "fp")
	require.NoError(t, err)
	assert.Nil(t, claim2)
	require.NotNil(t, stored)
	assert.Equal(t, 201, stored.Status)
	assert.Equal(t, "order 1", string(stored.Body))

	other, _, err := g.Begin(ctx, "bob", "k", "fp")
	require.NoError(t, err)
	require.NotNil(t, other, "keys are scoped per caller")
	require.NoError(t, other.Release(ctx))
}

// TestGuardEndsAClaimOnce: a deferred Release frees the key only if the
// claim did not end otherwise.
func TestGuardEndsAClaimOnce(t *testing.T) {
	ctx := t.Context()
	g := idempotency.NewGuard(nil)
	claim, _, err := g.Begin(ctx, "", "k", "fp")
	require.NoError(t, err)
	require.NoError(t, claim.Complete(ctx, idempotency.Record{Status: 200}))
	require.NoError(t, claim.Release(ctx), "after Complete: nothing")
	_, stored, err := g.Begin(ctx, "", "k", "fp")
	require.NoError(t, err)
	require.NotNil(t, stored, "still stored")

	claim, _, err = g.Begin(ctx, "", "k2", "fp")
	require.NoError(t, err)
	require.NoError(t, claim.Release(ctx))
	require.NoError(t, claim.Complete(ctx, idempotency.Record{Status: 200}), "after Release: nothing")
	again, stored, err := g.Begin(ctx, "", "k2", "fp")
	require.NoError(t, err)
	assert.Nil(t, stored)
	require.NotNil(t, again, "freed, and nothing stored")
	require.NoError(t, again.Release(ctx))
}

// TestGuardWhatIsNotStored: the key is freed, not the result stored, for
// a retryable status, an abandoned claim and a server error after the
// caller went away; a result too large cannot be replayed.
func TestGuardWhatIsNotStored(t *testing.T) {
	gone, cancel := context.WithCancel(t.Context())
	cancel()
	for _, tc := range []struct {
		name    string
		ctx     context.Context
		status  int
		abandon bool
		freed   bool
	}{
		{name: "a 201", ctx: t.Context(), status: 201},
		{name: "a 503", ctx: t.Context(), status: 503, freed: true},
		{name: "a 429", ctx: t.Context(), status: 429, freed: true},
		{name: "abandoned", ctx: t.Context(), status: 201, abandon: true, freed: true},
		{name: "a 500, the caller gone", ctx: gone, status: 500},
		{name: "a 503, the caller gone", ctx: gone, status: 503, freed: true},
		{name: "no status, the caller gone", ctx: gone},
		{name: "a 201, the caller gone", ctx: gone, status: 201},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := idempotency.NewGuard(nil)
			claim, _, err := g.Begin(t.Context(), "", "k", "fp")
			require.NoError(t, err)
			if tc.abandon {
				claim.Abandon()
			}
			require.NoError(t, claim.Complete(tc.ctx, idempotency.Record{Status: tc.status}))
			again, stored, err := g.Begin(t.Context(), "", "k", "fp")
			require.NoError(t, err)
			assert.Equal(t, tc.freed, again != nil, "freed")
			assert.Equal(t, !tc.freed, stored != nil, "stored")
			if again != nil {
				require.NoError(t, again.Release(t.Context()))
			}
		})
	}
	t.Run("too large to replay", func(t *testing.T) {
		g := idempotency.NewGuard(nil, idempotency.MaxResponse(4))
		claim, _, err := g.Begin(t.Context(), "", "k", "fp")
		require.NoError(t, err)
		require.NoError(t, claim.Complete(t.Context(), idempotency.Record{Status: 200, Body: []byte("12345")}))
		_, _, err = g.Begin(t.Context(), "", "k", "fp")
		assert.ErrorIs(t, err, idempotency.ErrNotReplayable)
	})
}

// TestGuardLostLeaseCancelsTheRequest: a claim whose lease is taken over
// has its context canceled for the cause ErrLeaseLost, and its result is
// not stored.
func TestGuardLostLeaseCancelsTheRequest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := &flakyStore{Store: idempotency.NewMemoryStore(0)}
		store.stealOnRenew.Store(true)
		ev := &events{}
		g := idempotency.NewGuard(store, quiet(ev, idempotency.Lease(3*time.Second))...)
		claim, _, err := g.Begin(t.Context(), "", "k", "fp")
		require.NoError(t, err)
		<-claim.Context().Done()
		assert.ErrorIs(t, context.Cause(claim.Context()), idempotency.ErrLeaseLost)
		assert.ErrorIs(t, claim.Complete(t.Context(), idempotency.Record{Status: 201}), idempotency.ErrLeaseLost)
		assert.Equal(t, []string{"lease_lost", "not_stored"}, ev.list())
	})
}

// TestGuardRefusesWhenTheStoreCannotClaim: a full store and a failing one
// refuse the request; a failure is reported.
func TestGuardRefusesWhenTheStoreCannotClaim(t *testing.T) {
	ctx := t.Context()
	full := idempotency.NewGuard(idempotency.NewMemoryStore(idempotency.MinMemoryBytes)) // room for one claim of a long key
	claim, _, err := full.Begin(ctx, "", strings.Repeat("a", 255), "fp")
	require.NoError(t, err)
	_, _, err = full.Begin(ctx, "", strings.Repeat("b", 255), "fp")
	assert.ErrorIs(t, err, idempotency.ErrFull)
	require.NoError(t, claim.Release(ctx))

	ev := &events{}
	_, _, err = idempotency.NewGuard(failingStore{}, quiet(ev)...).Begin(ctx, "", "k", "fp")
	require.Error(t, err)
	for _, sentinel := range []error{idempotency.ErrFull, idempotency.ErrInProgress, idempotency.ErrKeyReused, idempotency.ErrNotReplayable} {
		assert.False(t, errors.Is(err, sentinel), "%v", sentinel)
	}
	assert.True(t, strings.Contains(err.Error(), "connection refused"))
	assert.Equal(t, []string{"store_failed"}, ev.list())
}

// releaseCounter is a store that counts the releases asked of it.
type releaseCounter struct {
	idempotency.Store
	releases atomic.Int64
}

func (s *releaseCounter) Release(ctx context.Context, key string, claim idempotency.Record) error {
	s.releases.Add(1)
	return s.Store.Release(ctx, key, claim)
}

// TestGuardNeverReleasesWhatTheHandlerCompleted: a handler that stored its
// result itself and said so (Claim.Completed, as the SQL store's CompleteTx
// does in the handler's transaction) has its key kept, whatever the status
// and whether or not the caller went away: the guard asks the store for no
// release, so its record, committed with the effect, is replayed. Only an
// Abandon, which says that the handler's transaction did not commit, asks
// for one, and then the store frees the key only if it still holds the
// claim, never a completed record.
func TestGuardNeverReleasesWhatTheHandlerCompleted(t *testing.T) {
	gone, cancel := context.WithCancel(t.Context())
	cancel()
	for _, tc := range []struct {
		name     string
		ctx      context.Context
		status   int
		panicked bool // the claim ends by Release, as after a panic
	}{
		{name: "no status, the caller gone", ctx: gone},
		{name: "a 500, the caller gone", ctx: gone, status: 500},
		{name: "a 503, a ReleaseStatus", ctx: t.Context(), status: 503},
		{name: "a 429, a ReleaseStatus", ctx: t.Context(), status: 429},
		{name: "a 201", ctx: t.Context(), status: 201},
		{name: "a panic after completing", ctx: t.Context(), panicked: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			store := &releaseCounter{Store: idempotency.NewMemoryStore(0)}
			g := idempotency.NewGuard(store)
			claim, _, err := g.Begin(t.Context(), "", "k", "fp")
			require.NoError(t, err)
			committed := idempotency.Record{Fingerprint: claim.Record.Fingerprint, Done: true, Status: 201, Body: []byte("order 1")}
			require.NoError(t, store.Complete(t.Context(), claim.Key, claim.Record, committed, claim.TTL))
			claim.Completed()
			if tc.panicked {
				require.NoError(t, claim.Release(tc.ctx))
			} else {
				require.NoError(t, claim.Complete(tc.ctx, idempotency.Record{Status: tc.status}))
			}
			assert.Zero(t, store.releases.Load(), "no release asked of the store")
			again, stored, err := g.Begin(t.Context(), "", "k", "fp")
			require.NoError(t, err)
			assert.Nil(t, again, "not run again")
			require.NotNil(t, stored)
			assert.Equal(t, 201, stored.Status, "the handler's record, replayed")
			assert.Equal(t, "order 1", string(stored.Body))
		})
	}
	t.Run("abandoned: the transaction did not commit", func(t *testing.T) {
		store := &releaseCounter{Store: idempotency.NewMemoryStore(0)}
		g := idempotency.NewGuard(store)
		claim, _, err := g.Begin(t.Context(), "", "k", "fp")
		require.NoError(t, err)
		claim.Completed() // in the transaction, which then fails to commit
		claim.Abandon()
		require.NoError(t, claim.Complete(t.Context(), idempotency.Record{Status: 500}))
		assert.EqualValues(t, 1, store.releases.Load())
		again, _, err := g.Begin(t.Context(), "", "k", "fp")
		require.NoError(t, err)
		require.NotNil(t, again, "freed: the retry runs")
		require.NoError(t, again.Release(t.Context()))
	})
	t.Run("abandoned after the record committed", func(t *testing.T) {
		store := &releaseCounter{Store: idempotency.NewMemoryStore(0)}
		g := idempotency.NewGuard(store)
		claim, _, err := g.Begin(t.Context(), "", "k", "fp")
		require.NoError(t, err)
		committed := idempotency.Record{Fingerprint: claim.Record.Fingerprint, Done: true, Status: 201}
		require.NoError(t, store.Complete(t.Context(), claim.Key, claim.Record, committed, claim.TTL))
		claim.Completed()
		claim.Abandon() // a handler's mistake
		require.NoError(t, claim.Complete(t.Context(), idempotency.Record{Status: 500}))
		_, stored, err := g.Begin(t.Context(), "", "k", "fp")
		require.NoError(t, err)
		require.NotNil(t, stored, "the store releases a claim, never a completed record")
		assert.Equal(t, 201, stored.Status)
	})
}

// TestNewGuardRefusesTheMiddlewaresOptions: an option that only the HTTP
// middleware applies would do nothing to a Guard, and a call it was meant
// to refuse or scope would run unprotected: NewGuard panics naming it.
// Middleware takes each, and NewGuard each of the guard's.
func TestNewGuardRefusesTheMiddlewaresOptions(t *testing.T) {
	for _, tc := range []struct {
		opt  idempotency.Option
		want string
	}{
		{idempotency.Required(), "idempotency: NewGuard: option Required applies only to Middleware; for gRPC, grpcidempotency.Required"},
		{idempotency.Methods(http.MethodPut), "idempotency: NewGuard: option Methods applies only to Middleware"},
		{idempotency.MaxBody(10), "idempotency: NewGuard: option MaxBody applies only to Middleware; for gRPC, grpcidempotency.MaxRequest"},
		{idempotency.Scope(func(*http.Request) string { return "" }), "idempotency: NewGuard: option Scope applies only to Middleware; for gRPC, grpcidempotency.Scope"},
		{idempotency.SharedKeys(), "idempotency: NewGuard: option SharedKeys applies only to Middleware; for gRPC, grpcidempotency.SharedKeys"},
		{idempotency.ReplayExclude("X-Trace"), "idempotency: NewGuard: option ReplayExclude applies only to Middleware"},
	} {
		t.Run(strings.Fields(tc.want)[3], func(t *testing.T) {
			assert.PanicsWithValue(t, tc.want, func() { idempotency.NewGuard(nil, idempotency.TTL(time.Hour), tc.opt) })
			assert.NotPanics(t, func() { idempotency.Middleware(nil, idempotency.SharedKeys(), tc.opt) })
		})
	}
	assert.NotPanics(t, func() {
		idempotency.NewGuard(nil, idempotency.TTL(time.Hour), idempotency.Lease(time.Minute), idempotency.StoreTimeout(time.Second),
			idempotency.MaxResponse(10), idempotency.ReleaseStatus(503), idempotency.WithListener(&events{}),
			idempotency.WithLogger(slog.New(slog.DiscardHandler)), nil)
	})
}

// TestGuardCompleteUnderTheClaimsOwnContext: Complete given the claim's
// own context, which it cancels as it ends the claim, judges whether the
// caller left on that context as it was when called: a 5xx result of a
// caller still there is stored, not freed as if the caller had left; one
// of a caller that left is freed.
func TestGuardCompleteUnderTheClaimsOwnContext(t *testing.T) {
	type ctxKey struct{}
	for _, tc := range []struct {
		name   string
		ctx    func(c *idempotency.Claim) context.Context
		status int
	}{
		{name: "a 500", ctx: (*idempotency.Claim).Context, status: 500},
		{name: "a 500, under a context of the claim's", ctx: func(c *idempotency.Claim) context.Context {
			return context.WithValue(c.Context(), ctxKey{}, 1)
		}, status: 500},
		{name: "a 201", ctx: (*idempotency.Claim).Context, status: 201},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := idempotency.NewGuard(nil)
			c, _, err := g.Begin(t.Context(), "", "k2", "fp")
			require.NoError(t, err)
			require.NoError(t, c.Complete(tc.ctx(c), idempotency.Record{Status: tc.status, Body: []byte("boom")}))
			again, stored, err := g.Begin(t.Context(), "", "k2", "fp")
			require.NoError(t, err)
			assert.Nil(t, again, "not run again")
			require.NotNil(t, stored, "stored")
			assert.Equal(t, tc.status, stored.Status)
			assert.Equal(t, "boom", string(stored.Body))
		})
	}
	t.Run("a 500, the caller gone", func(t *testing.T) {
		g := idempotency.NewGuard(nil)
		caller, leave := context.WithCancel(t.Context())
		c, _, err := g.Begin(caller, "", "k2", "fp")
		require.NoError(t, err)
		leave()
		require.NoError(t, c.Complete(c.Context(), idempotency.Record{Status: 500}))
		again, stored, err := g.Begin(t.Context(), "", "k2", "fp")
		require.NoError(t, err)
		assert.Nil(t, again, "not freed: the handler may have committed before it failed")
		require.NotNil(t, stored)
	})
}

// TestGuardLostLeaseUnderTheClaimsOwnContext: a lost lease cancels the
// claim's context, which is not the caller leaving: Complete under it
// reports the result not stored, whatever its status.
func TestGuardLostLeaseUnderTheClaimsOwnContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := &flakyStore{Store: idempotency.NewMemoryStore(0)}
		store.stealOnRenew.Store(true)
		ev := &events{}
		g := idempotency.NewGuard(store, quiet(ev, idempotency.Lease(3*time.Second))...)
		claim, _, err := g.Begin(t.Context(), "", "k", "fp")
		require.NoError(t, err)
		<-claim.Context().Done()
		assert.ErrorIs(t, claim.Complete(claim.Context(), idempotency.Record{Status: 500}), idempotency.ErrLeaseLost)
		assert.Equal(t, []string{"lease_lost", "not_stored"}, ev.list())
	})
}
